"""A grading that fails for a reason outside the solution is no zero: a real fault (every grading container of
this env killed while it grades, with the Docker engine's own kill) is graded again once on another sandbox, then
reported as ``info['infra_failure']`` (the rollout leaves such an episode out of the loss); once the containers are
left alone, the same solution is graded as usual (the pool replaced the dead sandboxes)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from conftest import sandbox_settings

from agentrl.env import INFRA_FAILURE
from envs.code_exec import CodeExecEnv

TASK = "easy/loops/02"  # factorial(n)
LABEL = "agentrl-test-infra-failure"
# slow enough that the killer (polling every 0.2 s) finds each grading container while it grades
SLOW = "def factorial(n):\n    import math, time\n    time.sleep(1.0)\n    return math.factorial(n)"
pytestmark = pytest.mark.docker


def _block(code: str) -> str:
    return f"Sure.\n```python\n{code}\n```"


def _kill_while(client: Any, run: str, stop: threading.Event, killed: set[str]) -> None:
    import docker

    while not stop.is_set():
        for container in client.containers.list(filters={"label": f"{LABEL}={run}"}, ignore_removed=True):
            try:
                container.kill()
                killed.add(container.id)
            except docker.errors.APIError:
                pass  # already gone
        stop.wait(0.2)


def test_a_grading_container_killed_mid_grading_is_an_infrastructure_failure_not_a_zero() -> None:
    import docker

    run = uuid.uuid4().hex
    env = CodeExecEnv(
        tasks="easy", split="all", max_turns=4, sandbox={**sandbox_settings("docker"), "labels": {LABEL: run}}
    )
    client = docker.from_env()
    try:
        env.reset(seed=0, options={"task_id": TASK})
        stop, killed = threading.Event(), set[str]()
        killer = threading.Thread(target=_kill_while, args=(client, run, stop, killed), daemon=True)
        killer.start()
        try:
            _, reward, terminated, _, info = env.step(_block(SLOW))
        finally:
            stop.set()
            killer.join()
        assert terminated and reward == 0.0
        assert info[INFRA_FAILURE].startswith("grading failed twice"), info
        assert len(killed) >= 2, killed  # the first grading's container and the retry's

        env.reset(seed=0, options={"task_id": TASK})
        _, reward, terminated, _, info = env.step(_block(SLOW))
        assert (terminated, reward, info["success"]) == (True, 1.0, True), info
        assert INFRA_FAILURE not in info
    finally:
        env.close()
        for container in client.containers.list(all=True, filters={"label": f"{LABEL}={run}"}, ignore_removed=True):
            try:
                container.remove(force=True)  # this test's own containers
            except docker.errors.NotFound:
                pass  # the env's pool removed it between the listing and here
