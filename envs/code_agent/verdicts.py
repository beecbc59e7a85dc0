"""The env's one link to the grader: run test snippets against a draft, per-test verdicts back.

Everything CodeAgent-v0 grades (visible examples and hidden tests) goes through ``run_tests``, which
calls the trust-boundary grader of ``envs.code_exec.grading``: the draft runs in a fresh sandbox
process, the tests and their verdicts in the host-side judge, so a draft cannot forge its own verdicts
(see "Reward integrity" in docs/sandbox-security.md); its hack flags come back with the verdicts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from envs.code_exec.grading import Grader
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
    flags: tuple[str, ...] = ()  # "kind: detail" signals of attempted exploits (info["hack_flags"])

    @property
    def fraction(self) -> float:
        """Fraction of tests passed."""
        return sum(self.passed) / len(self.passed) if self.passed else 0.0

    @property
    def success(self) -> bool:
        """True when every test passed."""
        return bool(self.passed) and all(self.passed)


def run_tests(grader: Grader, sandbox: Any, task: CodingTask, code: str, tests: list[str]) -> Verdicts:
    """Grade ``code`` (a draft defining ``task.entry_point``) on ``tests`` across the trust boundary.

    The draft runs in a fresh process of ``sandbox``, the tests in ``grader``'s judge (whose config holds
    the per-test time limit).
    """
    result = grader.grade(sandbox, task.model_copy(update={"tests": tests}), "\n" + code)
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
    return Verdicts(list(result.passed), messages, setup_error, result.duration_s, tuple(result.flag_strings))
