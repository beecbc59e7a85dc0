"""Grade a solution against hidden tests in a fresh process of the sandbox (never in-process).

The harness runs ``code_prefix + solution`` once, then each test with its own alarm, and reports
one marker line per test on a private copy of stdout (the solution's own prints go to /dev/null,
so a chatty or truncated output cannot hide or forge results). Reward = fraction of tests passed.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from envs.code_exec.tasks import CodingTask

# Runs inside the sandbox with the sandbox's python3; reads its payload from stdin.
HARNESS = r"""
import json, os, signal, sys
def _main():
    payload = json.loads(sys.stdin.read())
    marker, per_test_s = payload["marker"], payload["per_test_s"]
    report = os.fdopen(os.dup(1), "w")
    sink = os.open(os.devnull, os.O_WRONLY)
    os.dup2(sink, 1); os.dup2(sink, 2)
    sys.stdout = sys.stderr = open(os.devnull, "w")
    def alarm(signum, frame):
        raise TimeoutError(f"timed out after {per_test_s} s")
    signal.signal(signal.SIGALRM, alarm)
    def run(code, name, namespace):
        signal.setitimer(signal.ITIMER_REAL, per_test_s)
        try:
            exec(compile(code, name, "exec"), namespace)
            return None
        except BaseException as exc:
            return f"{type(exc).__name__}: {exc}"[:300]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    namespace = {"__name__": "__solution__"}
    error = run(payload["program"], "<solution>", namespace)
    for index, test in enumerate(payload["tests"]):
        problem = error and f"solution failed: {error}" or run(test, f"<test {index}>", namespace)
        report.write(f"{marker} {index} {json.dumps(problem)}\n")
        report.flush()
_main()
"""


@dataclass
class GradeResult:
    """Outcome of grading one solution: per-test pass flags and the first failure messages."""

    passed: list[bool]
    errors: list[str] = field(default_factory=list)
    timed_out: bool = False
    duration_s: float = 0.0

    @property
    def fraction(self) -> float:
        """Fraction of tests passed (the code-exec reward)."""
        return sum(self.passed) / len(self.passed) if self.passed else 0.0

    @property
    def success(self) -> bool:
        """True when every test passed (what pass@k counts)."""
        return bool(self.passed) and all(self.passed)


def build_program(task: CodingTask, solution: str) -> str:
    """The code under test: the task's prefix followed by the solution (HumanEval's prompt + completion)."""
    prefix = task.code_prefix
    if prefix and not prefix.endswith("\n") and not solution.startswith("\n"):
        prefix += "\n"
    return prefix + solution


def parse_report(stdout: str, marker: str, num_tests: int) -> tuple[list[bool], list[str]]:
    """Per-test pass flags from the harness's marker lines; a test without a line failed."""
    passed = [False] * num_tests
    errors: list[str] = []
    seen: set[int] = set()
    for line in stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) != 3 or parts[0] != marker or not parts[1].isdigit():
            continue
        index = int(parts[1])
        if index >= num_tests or index in seen:
            continue
        seen.add(index)
        problem: Any = json.loads(parts[2])
        passed[index] = problem is None
        if problem is not None:
            errors.append(f"test {index}: {problem}")
    missing = [i for i in range(num_tests) if i not in seen]
    if missing:
        errors.append(f"tests {missing} reported nothing (timeout or crash)")
    return passed, errors


def grade(sandbox: Any, task: CodingTask, solution: str, *, per_test_timeout_s: float = 3.0) -> GradeResult:
    """Run ``task.tests`` against ``solution`` in a new process of ``sandbox`` (fresh state)."""
    marker = secrets.token_hex(8)
    payload = json.dumps(
        {
            "marker": marker,
            "per_test_s": per_test_timeout_s,
            "program": build_program(task, solution),
            "tests": task.tests,
        }
    )
    # The alarm bounds each test; the wall clock also bounds the solution's import-time code.
    budget_s = per_test_timeout_s * (len(task.tests) + 1) + 5.0
    start = time.monotonic()
    result = sandbox.exec(["python3", "-c", HARNESS], timeout_s=budget_s, stdin=payload)
    passed, errors = parse_report(result.stdout, marker, len(task.tests))
    return GradeResult(
        passed=passed, errors=errors, timed_out=bool(result.timed_out), duration_s=time.monotonic() - start
    )
