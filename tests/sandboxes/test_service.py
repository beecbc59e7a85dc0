"""Sandbox services (request/response processes running host-supplied source), on every backend."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from sandboxes import Sandbox, SandboxInputError, make_sandbox
from sandboxes.errors import SandboxStoppedFromOutsideError

# A service that answers each request by evaluating it (a test fixture: the host trusts itself here).
EVAL_SERVICE = r"""
import os, struct
def read_exact(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            raise SystemExit(0)
        data += chunk
    return data
while True:
    (size,) = struct.unpack(">I", read_exact(4))
    code = read_exact(size).decode()
    answer = repr(eval(code, globals())).encode()
    os.write(2, b"note\n")
    os.write(1, struct.pack(">I", len(answer)) + answer)
"""


def test_requests_share_state_and_stderr_is_captured(sandbox: Sandbox) -> None:
    service = sandbox.open_service(EVAL_SERVICE)
    assert service.request("globals().setdefault('n', 40) + 2", 5).text == "42"
    reply = service.request("globals()['n'] * 2", 5)
    assert (reply.text, reply.stderr, reply.ok, service.alive) == ("80", "note\n", True, True)
    service.close()
    assert not service.alive and service.request("1", 5).error.startswith("the service has ended")


def test_a_service_is_a_fresh_process_that_cannot_reach_the_session_or_the_channel(sandbox: Sandbox) -> None:
    sandbox.run_python("secret = 'session value'", 5)
    service = sandbox.open_service(EVAL_SERVICE)
    assert service.request("'secret' in globals()", 5).text == "False"
    # Only its own three pipes are open: not the supervisor's channel to the host, not the worker's pipes.
    assert service.request("sorted(int(fd) for fd in __import__('os').listdir('/proc/self/fd'))[:4]", 5).text in (
        "[0, 1, 2, 3]",  # listdir's own descriptor
        "[0, 1, 2]",
    )
    # A cell (and the background-process reaping after it) leaves the service running.
    sandbox.run_python("print(1)", 5)
    assert service.request("2 + 2", 5).text == "4"
    service.close()


def test_timeout_exit_and_oversized_reply_end_the_service_with_a_reply(sandbox: Sandbox) -> None:
    service = sandbox.open_service(EVAL_SERVICE)
    start = time.monotonic()
    looping = service.request("[0 for _ in iter(int, 1)]", 0.5)
    assert looping.timed_out and not looping.ok and time.monotonic() - start < 0.5 + 3
    assert not service.alive
    exited = sandbox.open_service(EVAL_SERVICE).request("__import__('os')._exit(3)", 5)
    assert (exited.exit_code, exited.timed_out, exited.ok) == (3, False, False)
    liar = sandbox.open_service(EVAL_SERVICE)
    huge = liar.request("__import__('os').write(1, b'\\xff\\xff\\xff\\xff')", 5)
    assert huge.oversized and not huge.ok
    crashed = sandbox.open_service("raise ValueError('boom')").request("1", 5)
    assert crashed.exit_code == 1 and "ValueError: boom" in crashed.stderr


def test_reset_ends_services_and_bad_input_is_refused(sandbox: Sandbox) -> None:
    service = sandbox.open_service(EVAL_SERVICE)
    sandbox.reset()
    assert "no such service" in service.request("1", 5).error and not service.alive
    with pytest.raises(SandboxInputError):
        sandbox.open_service(b"not text")  # type: ignore[arg-type]
    with pytest.raises(SandboxInputError):
        sandbox.open_service(EVAL_SERVICE).request("1", -1)


def test_a_service_killing_the_supervisor_is_a_lost_reply_and_the_sandbox_recovers(sandbox: Sandbox) -> None:
    service = sandbox.open_service(EVAL_SERVICE)
    reply = service.request("__import__('os').kill(__import__('os').getppid(), 9)", 5)
    assert reply.lost and not reply.ok and not service.alive
    assert sandbox.run_python("print(6 * 7)", 5).stdout == "42\n"


@pytest.mark.docker
def test_a_container_killed_from_outside_raises_not_a_lost_reply(config_for: Callable[..., Any]) -> None:
    """A lost session is the code's doing (a lost reply, scored) unless the container itself died without the OOM
    killer or vanished: nothing inside can do that, so it is an infrastructure fault the caller retries."""
    import docker

    sandbox = make_sandbox(config_for("docker"))
    try:
        service = sandbox.open_service(EVAL_SERVICE)
        assert service.request("1 + 1", 5).text == "2"
        docker.from_env().containers.get(sandbox.container_id).kill()  # the engine's own kill, from outside
        with pytest.raises(SandboxStoppedFromOutsideError, match="stopped from outside"):
            service.request("__import__('time').sleep(3)", 10)
        assert not service.alive
        assert sandbox.run_python("print(6 * 7)", 5).stdout == "42\n"  # restarted
        docker.from_env().containers.get(sandbox.container_id).remove(force=True)
        with pytest.raises(SandboxStoppedFromOutsideError, match="removed from outside"):
            sandbox.open_service(EVAL_SERVICE).request("1", 5)
        assert sandbox.run_python("print(7 * 6)", 5).stdout == "42\n"  # a fresh container
    finally:
        sandbox.close()
