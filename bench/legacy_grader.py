"""The code-exec grader before issue 15, kept for the benchmark and the adversarial suite only.

It ran the solution and the tests in ONE Python process inside the sandbox and reported verdicts on a
private dup of stdout tagged with a secret marker, which the solution could reach (frames, gc, builtins)
to forge its own verdicts. Never use it to grade: ``envs.code_exec.grading`` replaced it.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

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


def parse_report(stdout: str, marker: str, num_tests: int) -> list[bool]:
    """Per-test pass flags from the harness's marker lines; a test without a line failed."""
    passed, seen = [False] * num_tests, set()
    for line in stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) != 3 or parts[0] != marker or not parts[1].isdigit():
            continue
        index = int(parts[1])
        if index < num_tests and index not in seen:
            seen.add(index)
            passed[index] = json.loads(parts[2]) is None
    return passed


def legacy_grade(sandbox: Any, program: str, tests: list[str], per_test_timeout_s: float = 3.0) -> list[bool]:
    """Per-test pass flags of ``program`` (prefix + solution) under the old in-process harness."""
    marker = secrets.token_hex(8)
    payload = json.dumps({"marker": marker, "per_test_s": per_test_timeout_s, "program": program, "tests": tests})
    budget_s = per_test_timeout_s * (len(tests) + 1) + 5.0
    result = sandbox.exec(["python3", "-c", HARNESS], timeout_s=budget_s, stdin=payload)
    return parse_report(result.stdout, marker, len(tests))
