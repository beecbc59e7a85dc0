"""A SIGKILLed process's sandbox containers, pooled or not, are removed by the next process that starts one."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker.errors
import pytest
import requests

from sandboxes.docker_backend import connect
from sandboxes.reaper import OWNER_LABEL, labelled_containers, owner_tag

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
    stale = labelled_containers(client, f"{OWNER_LABEL}={owner}")
    assert [c["Id"] for c in stale] == [stale_id]  # make_sandbox, not a pool: left behind by the kill
    nxt, fresh_id = _start(START_ONE)  # the next process starts a sandbox of its own
    try:
        assert labelled_containers(client, f"{OWNER_LABEL}={owner}") == []
        assert client.containers.get(fresh_id).status == "running"  # a live owner's container is spared
    finally:
        assert nxt.stdin is not None
        nxt.stdin.write("\n")
        nxt.stdin.close()
        nxt.wait(timeout=60)


@pytest.mark.docker
def test_listing_and_reaping_survive_containers_removed_concurrently(config_for: Callable[..., Any]) -> None:
    """Another process removing its containers while we list is normal on a shared engine: listing must not
    inspect each container (docker-py's `containers.list` does, and raises NotFound for one removed in between)."""
    from sandboxes import DockerSandboxConfig
    from sandboxes.reaper import LABEL, RUN_LABEL, reap_stale_containers

    config_for("docker")  # skips (or fails under CI=true) without Docker
    client = connect(DockerSandboxConfig())
    run_id = f"race-{uuid.uuid4().hex[:8]}"
    created = [
        client.api.create_container(
            DockerSandboxConfig().image, command="true", labels={LABEL: "1", RUN_LABEL: run_id}
        )["Id"]
        for _ in range(12)
    ]

    def remove_all() -> None:
        for container_id in created:
            try:
                client.api.remove_container(container_id, force=True)
            except docker.errors.NotFound:
                pass  # the reaper below got there first
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: the reaper's removal of it is in progress
                    raise

    remover = threading.Thread(target=remove_all)
    remover.start()
    listings = []
    while remover.is_alive():
        listings.append(len(labelled_containers(client, f"{RUN_LABEL}={run_id}")))
        reap_stale_containers(client, run_id=run_id)  # removes what the other thread has not yet: both race
    remover.join()
    assert listings and labelled_containers(client, f"{RUN_LABEL}={run_id}") == []


class _ConflictingEngine:
    """A fake Docker API client (named as such): it answers each removal with a scripted error, because the
    engine's 409 "removal already in progress" comes only from a race that the real test above provokes
    nondeterministically."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.api = self

    def containers(self, **_: Any) -> list[dict[str, Any]]:
        return [{"Id": "c1", "Names": ["/sandbox-1"], "Labels": {}, "State": "exited"}]

    def remove_container(self, container_id: str, force: bool) -> None:
        raise self.error


def test_a_removal_already_in_progress_is_someone_elses_and_other_engine_errors_surface() -> None:
    from sandboxes.reaper import reap_stale_containers

    response = requests.Response()
    response.status_code = 409
    in_progress = docker.errors.APIError(
        "conflict", response=response, explanation="removal of container c1 is already in progress"
    )
    assert reap_stale_containers(_ConflictingEngine(in_progress), run_id="r") == []
    response_500 = requests.Response()
    response_500.status_code = 500
    broken = docker.errors.APIError("boom", response=response_500, explanation="driver failed")
    with pytest.raises(docker.errors.APIError, match="driver failed"):
        reap_stale_containers(_ConflictingEngine(broken), run_id="r")
