"""Verifiers-v0 with a verifiers environment package written as its authors write them, pip-installed.

``tests/interop/thirdparty/reverse_text`` is an ``environments/``-style package (its own pyproject, the
Taskset exported via ``__all__``); scripts/setup_thirdparty.sh installs it into .venv-thirdparty/vf-envs.
verifiers' own ``vf.load_environment`` and Verifiers-v0 find it by the same id and play the same tasks.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

pytest.importorskip("verifiers.v1", reason="needs verifiers: pip install 'agentrl[verifiers]'")

from interop_harness import run_config, train_two_steps
from thirdparty_env import component

from envs.interop.verifiers_env import VerifiersEnv


@pytest.fixture(scope="module", autouse=True)
def installed_package() -> Iterator[Path]:
    """The package's install folder on sys.path (and on PYTHONPATH for subprocesses), as an installed package is."""
    folder = component("vf-envs")
    sys.path.insert(0, str(folder))
    yield folder
    sys.path.remove(str(folder))


def test_verifiers_own_loader_and_the_adapter_agree() -> None:
    import verifiers.v1 as vf

    env = vf.load_environment(vf.resolve_env_config({"taskset": {"id": "reverse-text", "num_texts": 3}}))
    assert type(env).__name__ == "SingleAgentEnv"  # a plain taskset: one reply per task
    ours = VerifiersEnv(taskset="reverse-text", taskset_kwargs={"num_texts": 3})
    assert ours.task_ids() == [task.data.id for task in env.taskset] == ["reverse-0", "reverse-1", "reverse-2"]


def test_right_and_wrong_replies_are_scored_by_the_packages_reward() -> None:
    env = VerifiersEnv(taskset="reverse-text", limit=2)
    check_env(env, skip_render_check=True)
    messages, _ = env.reset(options={"task_id": "reverse-0"})
    assert messages == [
        {"role": "system", "content": "Reply with the reversed text only."},
        {"role": "user", "content": "Reverse the text character by character: hello world"},
    ]
    _, reward, terminated, _, info = env.step("dlrow olleh")
    assert (reward, terminated, info["success"], info["reward_components"]) == (1.0, True, True, {"lcs_ratio": 1.0})
    env.reset(options={"task_id": "reverse-0"})
    _, reward, _, _, info = env.step("hello world")
    assert reward < 0.5 and not info["success"]


@pytest.mark.slow
def test_trains_two_steps_on_the_package(tiny_model_dir: Path, tmp_path: Path) -> None:
    env = {"id": "agentrl/Verifiers-v0", "kwargs": {"taskset": "reverse-text", "limit": 4}}
    records = train_two_steps(run_config(tmp_path, tiny_model_dir, env), "vf-package")
    assert all(0.0 <= r["episode/reward_mean"] <= 1.0 for r in records)
