"""Grading fails closed: a sandbox that cannot hide the host's files from the solution is refused.

A solution that can read the task data, a dataset installed next to the interpreter or a task generator's
source can read its hidden tests' answers, and one that shares the trainer's uid can reach the trainer's
own pipes. The sandbox says when that is so (``Sandbox.isolation_error``: the process backend where the
kernel refused its namespaces, or with ``private_root`` off); grading then raises instead of scoring.
"""

from __future__ import annotations

from typing import Any

from envs.code_exec.grading.result import GradingError


class UnsafeSandboxError(GradingError):
    """The sandbox shows the solution the host's filesystem (or the trainer's uid): grading refuses to run there."""


def require_isolation(sandbox: Any) -> None:
    """Raise ``UnsafeSandboxError`` unless ``sandbox`` hides the host from the code it runs."""
    reason = getattr(sandbox, "isolation_error", None)
    if reason:
        raise UnsafeSandboxError(
            f"refusing to grade in {sandbox!r}: {reason}, so a solution could read the hidden tests' answers (task "
            "data, datasets next to the interpreter, generator source) and reach the trainer's files. Fix: use the "
            "Docker backend (sandbox kind: docker); or let the process backend make its namespaces: inside a "
            "container run it with --security-opt seccomp=unconfined --security-opt apparmor=unconfined (a root "
            "trainer also needs --cap-add SYS_ADMIN), on a host allow user namespaces (sysctl "
            "kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0); and keep "
            "ProcessSandboxConfig.private_root on"
        )
