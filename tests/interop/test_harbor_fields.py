"""Harbor-v0 reads task.toml as Harbor 0.26 does, and refuses, naming the field, what it would not honour."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envs.interop.harbor import load_harbor_tasks
from envs.interop.harbor.env import parse_reward
from envs.interop.harbor.task_config import HarborFieldError
from envs.interop.harbor.tasks import BUNDLED

BASE = (BUNDLED / "fix-add" / "task.toml").read_text()


def _task(tmp_path: Path, toml: str, tests_dockerfile: bool = False) -> Path:
    task = tmp_path / "task"
    shutil.copytree(BUNDLED / "fix-add", task)
    (task / "task.toml").write_text(toml)
    if tests_dockerfile:
        (task / "tests" / "Dockerfile").write_text("FROM agentrl-python:1\nCOPY . /tests/\n")
    return task


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (BASE + '\n[[steps]]\nname = "step-1"\n', r"\[\[steps\]\].*multi-step tasks"),
        (BASE.replace("cpus = 1", "cpus = 1\nallow_internet = true"), r"allow_internet = True.*offline"),
        (BASE.replace("cpus = 1", 'cpus = 1\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]'), "allowlist"),
        (BASE.replace("cpus = 1", "cpus = 1\ngpus = 1"), r"gpus = 1.*no accelerator"),
        (BASE.replace("cpus = 1", 'cpus = 1\nos = "windows"'), "only Linux"),
        (BASE.replace("cpus = 1", 'cpus = 1\n[[environment.mcp_servers]]\nname = "x"'), "mcp_servers.*McpTools-v0"),
        (BASE.replace("[agent]", '[agent]\nuser = "root"'), r"\[agent\] user = 'root'"),
        (BASE.replace("[verifier]", '[verifier]\nnetwork_mode = "public"'), r"\[verifier\] network_mode"),
        (BASE + '\n[[verifier.collect]]\ncommand = "ls"\n', "collect commands"),
        (BASE.replace("[metadata]", "frobnicate = 1\n[metadata]"), "frobnicate.*does not know"),
        (BASE.replace("cpus = 1", "cpus = 1\nturbo = true"), r"\[environment\] has key\(s\) turbo"),
        ('artifacts = [{source = "/app/x", service = "db"}]\n' + BASE, "only plain source paths"),
    ],
)
def test_fields_the_adapter_does_not_honour_are_refused(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(HarborFieldError, match=message):
        load_harbor_tasks(_task(tmp_path, toml))


def test_verifier_mode_resolves_as_harbor_does(tmp_path: Path) -> None:
    (bundled,) = load_harbor_tasks(BUNDLED / "fix-add")
    assert (bundled.verifier_mode, bundled.tests_bundled) == ("shared", False)
    separate = BASE.replace("[verifier]", '[verifier]\nenvironment_mode = "separate"')
    (task,) = load_harbor_tasks(_task(tmp_path / "a", separate, tests_dockerfile=True))
    assert (task.verifier_mode, task.tests_bundled) == ("separate", True) and task.verifier_dockerfile is not None
    (task,) = load_harbor_tasks(_task(tmp_path / "b", separate))  # no tests/Dockerfile: the task's own image
    assert (task.verifier_mode, task.tests_bundled, task.verifier_dockerfile) == ("separate", False, None)
    implied = BASE + '\n[verifier.environment]\ndocker_image = "agentrl-python:1"\n'
    (task,) = load_harbor_tasks(_task(tmp_path / "c", implied))
    assert (task.verifier_mode, task.verifier_docker_image) == ("separate", "agentrl-python:1")
    artifacts = 'artifacts = ["/app/out.txt", {source = "/app/logs/", destination = "logs"}]\n' + BASE
    assert load_harbor_tasks(_task(tmp_path / "d", artifacts))[0].artifacts == ("/app/out.txt", "/app/logs")


def test_rewards_are_read_in_harbors_order() -> None:
    assert parse_reward({"reward.txt": b"0.5\n"}) == (0.5, {})
    both = {"reward.txt": b"0", "reward.json": b'{"reward": 1, "style": 0.5}'}
    assert parse_reward(both) == (1.0, {"reward": 1.0, "style": 0.5})  # reward.json wins, as in Harbor
    assert parse_reward({"rewards.json": b'{"a": 1, "b": 0}'}) == (0.5, {"a": 1.0, "b": 0.0})
