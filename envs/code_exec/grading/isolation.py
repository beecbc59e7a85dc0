"""Grading fails closed: a sandbox whose code could see the host's files or act as the trainer's uid is refused.

A solution that can read the task data, a dataset installed next to the interpreter or a task generator's
source can read its hidden tests' answers, and one that shares the trainer's uid can reach the trainer's
own pipes. The sandbox says when either is so (``Sandbox.host_isolation_problem()``: the process backend
where the kernel refused its namespaces, with ``private_root`` off, or started by a non-root trainer);
grading then raises instead of scoring.
"""

from __future__ import annotations

from typing import Any

from envs.code_exec.grading.result import GradingError
from sandboxes import SandboxIsolationError


class UnsafeSandboxError(GradingError, SandboxIsolationError):
    """The sandbox shows the solution the host's filesystem (or the trainer's uid): grading refuses to run there."""


def require_isolation(sandbox: Any) -> None:
    """Raise ``UnsafeSandboxError`` unless ``sandbox`` hides the host from the code it runs."""
    problem = sandbox.host_isolation_problem()
    if problem:
        raise UnsafeSandboxError(
            f"refusing to grade in {sandbox!r}: {problem}; so a solution could read the hidden tests' answers (task "
            "data, datasets next to the interpreter, generator source) or reach the trainer's files and pipes"
        )
