"""Grading code-exec solutions across a trust boundary: the verdict is computed where the solution cannot reach.

* the **solution** runs in a fresh process of the episode's sandbox (a sandbox service), never the
  model's session; it answers calls with plain data (``wire``) and carries the audit-hook detectors
  (``monitor``);
* the **judge** runs the task's prefix and hidden tests on the host, in its own hardened process
  (``judge``); the entry point is a proxy whose calls travel as plain data;
* the **relay** (``Grader``, in this process) forwards the judge's requests to the solution, each bounded
  by the running test's deadline, and collects verdicts and hack flags (``GradeResult``).

Public API: ``Grader`` / ``GraderConfig`` (``grade(sandbox, task, solution) -> GradeResult``), ``grade``
(one-off), ``GradeResult``, ``TestVerdict``, ``HackFlag``, ``build_program``, ``scan_source``, ``UnsafeSandboxError``
(a sandbox that shows the solution the host's files is refused: ``isolation``).
"""

from envs.code_exec.grading.grader import GradableTask, Grader, GraderConfig, build_program, grade
from envs.code_exec.grading.isolation import UnsafeSandboxError, require_isolation
from envs.code_exec.grading.result import GradeResult, GradingError, GradingSetupError, HackFlag, TestVerdict
from envs.code_exec.grading.scan import scan_source

__all__ = [
    "GradableTask",
    "GradeResult",
    "Grader",
    "GraderConfig",
    "GradingError",
    "GradingSetupError",
    "HackFlag",
    "TestVerdict",
    "UnsafeSandboxError",
    "build_program",
    "grade",
    "require_isolation",
    "scan_source",
]
