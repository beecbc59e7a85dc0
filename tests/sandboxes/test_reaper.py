"""A SIGKILLed process's sandbox containers, pooled or not, are removed by the next process that starts one."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandboxes.docker_backend import connect
from sandboxes.reaper import OWNER_LABEL, owner_tag

ROOT = Path(__file__).resolve().parents[2]
START_ONE = (
    "from sandboxes import DockerSandboxConfig, make_sandbox\n"
    "sandbox = make_sandbox(DockerSandboxConfig())\n"
    "print(sandbox.container_id, flush=True)\n"
    "input()\n"  # hold the sandbox until told (or killed)
)


def _start(script: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, text=True
    )
    watchdog = threading.Timer(90, proc.kill)  # readline() must not hang the suite if the child does
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
    finally:
        watchdog.cancel()
    assert line, f"the child printed no container id (exit {proc.poll()})"
    return proc, line


@pytest.mark.docker
@pytest.mark.slow
def test_a_killed_process_container_is_reaped_by_the_next_sandbox_start(config_for: Callable[..., Any]) -> None:
    config_for("docker")  # skips (or fails under CI=true) without Docker
    client = connect(config_for("docker"))
    killed, stale_id = _start(START_ONE)
    owner = owner_tag(killed.pid)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    stale = client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={owner}"})
    assert [c.id for c in stale] == [stale_id]  # make_sandbox, not a pool: left behind by the kill
    nxt, fresh_id = _start(START_ONE)  # the next process starts a sandbox of its own
    try:
        assert client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={owner}"}) == []
        assert client.containers.get(fresh_id).status == "running"  # a live owner's container is spared
    finally:
        assert nxt.stdin is not None
        nxt.stdin.write("\n")
        nxt.stdin.close()
        nxt.wait(timeout=60)
