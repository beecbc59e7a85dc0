"""Harbor-v0 on the bundled Harbor-format tasks, in real hardened Docker sandboxes (images built offline)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from gymnasium.utils.env_checker import check_env
from interop_harness import train_two_steps

from agentrl.errors import ConfigError
from agentrl.tools.toolcall import format_tool_call
from envs.interop.harbor import HarborEnv, load_harbor_tasks
from envs.interop.harbor.image import HarborImageError
from envs.interop.harbor.tasks import BUNDLED

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env() -> Iterator[HarborEnv]:
    from sandboxes import docker_available

    if not docker_available():
        pytest.skip("no Docker engine with the sandbox image (run scripts/docker_setup.sh)")
    harbor = HarborEnv(max_turns=3)
    yield harbor
    harbor.close()


def _solution(task_dir: Path) -> str:
    return (task_dir / "solution" / "solve.sh").read_text().split("\n", 1)[1]


def test_loader_reads_the_bundled_tasks_and_names_problems(tmp_path: Path) -> None:
    tasks = load_harbor_tasks(BUNDLED)
    assert [t.task_id for t in tasks] == ["count-lines", "fix-add", "write-greeting"]
    assert tasks[1].verifier_timeout_s == 30.0 and tasks[1].dockerfile is not None and tasks[1].memory_mb == 256
    broken = tmp_path / "broken"
    shutil.copytree(BUNDLED / "fix-add", broken)
    (broken / "tests" / "test.sh").unlink()
    with pytest.raises(ConfigError, match="no tests/test.sh"):
        load_harbor_tasks(broken)
    (broken / "tests" / "test.sh").write_text("exit 0\n")
    shutil.rmtree(broken / "environment")
    (broken / "environment").mkdir()
    (broken / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    with pytest.raises(ConfigError, match="docker-compose environments are not supported"):
        load_harbor_tasks(broken)


def test_oracle_solutions_score_one_and_doing_nothing_scores_zero(env: HarborEnv) -> None:
    check_env(env, skip_render_check=True)
    for task in load_harbor_tasks(BUNDLED):
        messages, info = env.reset(seed=0, options={"task_id": task.task_id})
        assert messages[1]["content"] == task.instruction and info == {"task_id": task.task_id}
        observation, reward, terminated, _, _ = env.step(f"```bash\n{_solution(task.path)}```")
        assert (reward, terminated) == (0.0, False) and observation[0]["content"].startswith("Output:\n[exit code 0]")
        _, reward, terminated, _, info = env.step("Done.")
        assert (reward, terminated, info["success"]) == (1.0, True, True), info
        env.reset(seed=0, options={"task_id": task.task_id})
        _, reward, terminated, _, info = env.step(format_tool_call("submit", {}))
        assert (reward, terminated, info["success"]) == (0.0, True, False)


def test_tests_are_hidden_and_a_planted_reward_file_does_not_count(env: HarborEnv) -> None:
    env.reset(seed=0, options={"task_id": "write-greeting"})
    plant = (
        "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; chmod 444 /logs/verifier/reward.txt; ls /tests"
    )
    observation, *_ = env.step(format_tool_call("bash", {"command": plant}))
    assert observation[0] == {"role": "tool", "content": "[exit code 0]", "name": "bash"}  # /tests is empty
    (background,) = env.step("```bash\n(sleep 2; echo 1 > /logs/verifier/reward.txt) &\n```")[0]
    assert "exit code 0" in background["content"]
    _, reward, terminated, _, info = env.step("Done.")  # the last turn: the verifier runs
    assert (reward, terminated, info["success"]) == (0.0, True, False)


def test_missing_images_are_named(tmp_path: Path, env: HarborEnv) -> None:
    task = tmp_path / "needs-ubuntu"
    shutil.copytree(BUNDLED / "write-greeting", task)
    (task / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    with pytest.raises(HarborImageError, match=r"FROM ubuntu:24.04.*cannot be pulled offline"):
        HarborEnv(tasks=str(task)).reset(seed=0)
    (task / "environment" / "Dockerfile").write_text("FROM agentrl-python:1\nRUN pip install requests\n")
    with pytest.raises(HarborImageError, match="failed offline"):
        HarborEnv(tasks=str(task)).reset(seed=0)
    shutil.rmtree(task / "environment")
    (task / "task.toml").write_text('[environment]\ndocker_image = "ghcr.io/example/absent:1"\n')
    with pytest.raises(HarborImageError, match="absent:1.*not on this Docker engine"):
        HarborEnv(tasks=str(task)).reset(seed=0)


@pytest.mark.slow
def test_harbor_tiny_config_trains_two_steps(tiny_model_dir: Path, tmp_path: Path, env: HarborEnv) -> None:
    config = yaml.safe_load((ROOT / "configs" / "harbor_tiny.yaml").read_text())
    config["model"]["path"] = str(tiny_model_dir)
    config["logging"]["run_root"] = str(tmp_path / "runs")
    path = tmp_path / "harbor.yaml"
    path.write_text(yaml.safe_dump(config))
    records = train_two_steps(path, "harbor")
    assert all(0.0 <= r["episode/reward_mean"] <= 1.0 for r in records)
