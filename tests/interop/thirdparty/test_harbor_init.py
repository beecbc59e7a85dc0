"""Harbor-v0 on a task made by ``harbor init`` (harbor 0.26 from PyPI) with its default separate verifier.

``harbor init`` writes ``[verifier] environment_mode = "separate"``, a ``tests/Dockerfile`` that installs
pytest, and a ``test.sh`` that runs it. The test fills in the task as its author would (instruction, test,
solution, and the ``artifacts`` a separate verifier receives) and makes its images buildable on this offline
engine (docs/interop.md): FROM lines on local images, pytest baked into agentrl-harbor-pytest:1.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from gymnasium.utils.env_checker import check_env
from interop_harness import run_config, train_two_steps
from thirdparty_env import component

from envs.interop.harbor import HarborEnv, load_harbor_tasks
from envs.interop.harbor.image import HarborImageError

pytestmark = pytest.mark.docker
TEST = """from pathlib import Path


def test_greeting():
    assert Path("/app/hello.txt").read_text().strip() == "hello"
"""


def harbor_init_task() -> Path:
    """The task directory exactly as ``harbor init agentrl/hello-file`` wrote it."""
    return component("harbor-task") / "hello-file"


def make_offline(task: Path) -> None:
    """Swap the images the Dockerfiles pull (ubuntu, python, uv from a registry) for local ones."""
    env_file, tests_file = task / "environment" / "Dockerfile", task / "tests" / "Dockerfile"
    env_text, tests_text = env_file.read_text(), tests_file.read_text()
    assert "FROM ubuntu:24.04" in env_text and "FROM python:3.12-slim" in tests_text, (env_text, tests_text)
    assert "uv pip install --system pytest==8.4.1 pytest-json-ctrf==0.3.5" in tests_text, tests_text
    env_file.write_text(env_text.replace("FROM ubuntu:24.04", "FROM agentrl-python:1"))
    kept = [line for line in tests_text.splitlines() if line.startswith(("WORKDIR", "COPY . "))]
    tests_file.write_text("\n".join(["FROM agentrl-harbor-pytest:1", *kept]) + "\n")


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sandboxes import docker_available

    if not docker_available():
        pytest.skip("no Docker engine with the sandbox image (run scripts/docker_setup.sh)")
    task = tmp_path_factory.mktemp("harbor") / "hello-file"
    shutil.copytree(harbor_init_task(), task)
    (task / "instruction.md").write_text("Write the word hello into /app/hello.txt.\n")
    (task / "tests" / "test_outputs.py").write_text(TEST)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho hello > /app/hello.txt\n")
    # Harbor gives a separate verifier only the declared artifacts (and /logs/artifacts).
    toml = task / "task.toml"
    assert "\nartifacts = []\n" in toml.read_text()
    toml.write_text(toml.read_text().replace("\nartifacts = []\n", '\nartifacts = ["/app/hello.txt"]\n'))
    make_offline(task)
    return task


@pytest.fixture(scope="module")
def env(task_dir: Path) -> Iterator[HarborEnv]:
    harbor = HarborEnv(tasks=str(task_dir), max_turns=3)
    yield harbor
    harbor.close()


def test_harbor_init_writes_a_separate_verifier_and_its_registry_images_are_named() -> None:
    (task,) = load_harbor_tasks(harbor_init_task())
    assert (task.verifier_mode, task.tests_bundled) == ("separate", True)
    with pytest.raises(HarborImageError, match=r"FROM ubuntu:24.04.*cannot be pulled offline"):
        HarborEnv(tasks=str(harbor_init_task())).preflight()


def test_right_answer_scores_one_in_the_separate_verifier_wrong_scores_zero(env: HarborEnv) -> None:
    check_env(env, skip_render_check=True)
    for command, expected in (("echo hello > hello.txt", 1.0), ("echo bye > hello.txt", 0.0), ("true", 0.0)):
        messages, _ = env.reset(seed=0, options={"task_id": "hello-file"})
        assert messages[1]["content"] == "Write the word hello into /app/hello.txt."
        observation, *_ = env.step(f"```bash\n{command}\n```")
        assert observation[0]["content"].startswith("Output:\n[exit code 0]")
        _, reward, terminated, _, info = env.step("Done.")
        assert (reward, terminated) == (expected, True), info
        assert info["verifier_mode"] == "separate"
        assert info["success"] is (expected == 1.0)


def test_the_separate_verifier_sees_only_the_artifacts(env: HarborEnv) -> None:
    # pytest is in the verifier's image only: the agent's container has none, so a shared run would score 0.
    env.reset(seed=0, options={"task_id": "hello-file"})
    (observation,), *_ = env.step("```bash\necho hello > hello.txt; echo other > notes.txt; command -v pytest\n```")
    assert "[exit code 1]" in observation["content"]
    _, reward, _, _, info = env.step("Done.")
    assert (reward, info["artifacts"]) == (1.0, 1)  # hello.txt crossed; notes.txt is no declared artifact


@pytest.mark.slow
def test_trains_two_steps_on_the_harbor_init_task(tiny_model_dir: Path, tmp_path: Path, task_dir: Path) -> None:
    env = {"id": "agentrl/Harbor-v0", "kwargs": {"tasks": str(task_dir), "max_turns": 2}}
    path = run_config(tmp_path, tiny_model_dir, env)
    config = yaml.safe_load(path.read_text())
    config["rollout"]["prompts_per_step"] = 1
    path.write_text(yaml.safe_dump(config))
    records = train_two_steps(path, "harbor-init")
    assert all(0.0 <= r["episode/reward_mean"] <= 1.0 for r in records)
