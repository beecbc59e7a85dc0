"""The env's one link to the grader: run test snippets against a draft, per-test verdicts back.

Everything CodeAgent-v0 grades (visible examples and hidden tests) goes through ``run_tests``, which
calls ``envs.code_exec.grading``'s public entry point: when the grader moves behind its trust
boundary, this function is the one line to change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from envs.code_exec.grading import grade
from envs.code_exec.tasks import CodingTask

_TEST_ERROR = re.compile(r"^test (\d+): (.*)$", re.DOTALL)
_SOLUTION_FAILED = "solution failed: "


@dataclass(frozen=True)
class Verdicts:
    """Per-test pass flags and failure messages (None where a test passed) of one draft."""

    passed: list[bool]
    messages: list[str | None]
    setup_error: str | None = None
    duration_s: float = 0.0

    @property
    def fraction(self) -> float:
        """Fraction of tests passed."""
        return sum(self.passed) / len(self.passed) if self.passed else 0.0

    @property
    def success(self) -> bool:
        """True when every test passed."""
        return bool(self.passed) and all(self.passed)


def run_tests(sandbox: Any, task: CodingTask, code: str, tests: list[str], timeout_s: float) -> Verdicts:
    """Grade ``code`` (a draft defining ``task.entry_point``) on ``tests`` in a fresh sandbox process."""
    result = grade(sandbox, task.model_copy(update={"tests": tests}), "\n" + code, per_test_timeout_s=timeout_s)
    messages: list[str | None] = [None] * len(tests)
    setup_error = None
    for error in result.errors:
        match = _TEST_ERROR.match(error)
        if match is None:
            continue
        index, problem = int(match.group(1)), match.group(2)
        if problem.startswith(_SOLUTION_FAILED):
            setup_error = problem[len(_SOLUTION_FAILED) :]
        if index < len(tests):
            messages[index] = problem
    for index, ok in enumerate(result.passed):
        if not ok and messages[index] is None:
            messages[index] = "TimeoutError: no result (timeout or crash)"
    return Verdicts(list(result.passed), messages, setup_error, result.duration_s)
