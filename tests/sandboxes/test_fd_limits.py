"""Many sandboxes in one process: descriptors above select()'s 1024 limit, and no descriptors left per sandbox.

The main job (36 episodes in flight, each env with a run sandbox and a grading sandbox, plus 32 for the
evaluation) held over 1024 descriptors: every sandbox start and grading then raised "filedescriptor out of range
in select()", and the gradings were scored 0 and flagged. Two causes, each tested here: waits used select(), and
every Docker sandbox made a client of its own whose connection pool outlived the sandbox.
"""

from __future__ import annotations

import gc
import os
import resource
import select
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sandboxes import make_sandbox
from sandboxes.session.fdwait import readable, wait_fds, writable

HIGH_FD = 1500  # above FD_SETSIZE (1024)


@pytest.fixture
def fd_headroom() -> Iterator[None]:
    """A soft descriptor limit above ``HIGH_FD`` for this test (restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= HIGH_FD + 200:
        pytest.skip(f"the hard limit of open files is {hard}: descriptors above {HIGH_FD} cannot exist here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, HIGH_FD + 200), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_waits_work_on_descriptors_select_refuses(fd_headroom: None) -> None:
    read_end, write_end = os.pipe()
    high_r, high_w = os.dup2(read_end, HIGH_FD), os.dup2(write_end, HIGH_FD + 1)
    os.close(read_end)
    os.close(write_end)
    try:
        with pytest.raises(ValueError, match="filedescriptor out of range"):  # what failed before
            select.select([high_r], [], [], 0)
        assert not readable(high_r, 0.05)  # nothing written yet: times out
        assert writable(high_w, 0)
        os.write(high_w, b"x")
        assert wait_fds([high_r], [high_w], 1.0) == ([high_r], [high_w])
        assert os.read(high_r, 1) == b"x"
        os.close(high_w)
        assert readable(high_r, 1.0) and os.read(high_r, 1) == b""  # EOF is readiness, as with select
    finally:
        for fd in (high_r, high_w):
            try:
                os.close(fd)
            except OSError:
                pass


def _occupy_low_descriptors(count: int) -> list[int]:
    """Open ``/dev/null`` until ``count`` more descriptors are held, so the next ones are numbered high."""
    return [os.open(os.devnull, os.O_RDONLY) for _ in range(count)]


def test_a_sandbox_started_above_1024_descriptors_runs_cells(
    fd_headroom: None, backend: str, config_for: Callable[..., Any]
) -> None:
    held = _occupy_low_descriptors(1100)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "ProcessSandbox isolation", RuntimeWarning)
            sandbox = make_sandbox(config_for(backend))
        try:
            result = sandbox.run_python("print(6 * 7)", 10)
            assert (result.exit_code, result.stdout) == (0, "42\n")
            sandbox.reset()
            assert sandbox.run_python("print('again')", 10).stdout == "again\n"
        finally:
            sandbox.close()
    finally:
        for fd in held:
            os.close(fd)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.docker
def test_docker_sandboxes_leave_no_descriptors_behind(config_for: Callable[..., Any]) -> None:
    """Closing a sandbox frees its descriptors at once (no garbage collection needed): sandboxes share the
    process's one client per engine; a client each kept about eight descriptors per closed sandbox."""
    config = config_for("docker")
    for sandbox in [make_sandbox(config) for _ in range(12)]:  # the shared client's pool fills (10 at most)
        sandbox.close()
    was_enabled = gc.isenabled()
    gc.disable()  # what is left must not wait for the cyclic collector
    try:
        before = _open_descriptors()
        sandboxes = [make_sandbox(config) for _ in range(12)]
        for sandbox in sandboxes:
            assert sandbox.run_python("1 + 1", 10).stdout == "2\n"
        during = _open_descriptors()
        for sandbox in sandboxes:
            sandbox.close()
        del sandboxes
        after = _open_descriptors()
    finally:
        if was_enabled:
            gc.enable()
    assert during - before <= 12 * 3  # the session socket each, and the shared pool's connections
    assert after - before <= 4, f"{after - before} descriptors left behind by 12 closed sandboxes"
