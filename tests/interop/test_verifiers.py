"""Verifiers-v0 with a real verifiers (v1) taskset built in tests/interop/vf_tasks.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

from agentrl.errors import ConfigError

pytest.importorskip("verifiers.v1", reason="needs verifiers: pip install 'agentrl[verifiers]'")

from interop_harness import run_config, train_two_steps

from envs.interop.verifiers_env import VerifiersEnv


def test_taskset_tasks_prompts_and_the_tasks_own_rewards() -> None:
    env = VerifiersEnv(taskset="vf_tasks:ReverseTaskset", taskset_kwargs={"num_words": 3})
    check_env(env, skip_render_check=True)
    assert env.task_ids() == ["rev-agent", "rev-reward", "rev-policy"]
    messages, info = env.reset(seed=0, options={"task_id": "rev-reward"})
    assert messages == [
        {"role": "system", "content": "Answer with the word only."},
        {"role": "user", "content": "Reverse the word: reward"},
    ]
    assert info["task_id"] == "rev-reward" and len(info["task_key"]) == 64
    observation, reward, terminated, truncated, info = env.step("drawer")
    assert (observation, reward, terminated, truncated) == ([], 1.5, True, False)
    assert info["reward_components"] == {"exact": 1.0, "similarity": 1.0} and info["success"]
    assert info["metrics"] == {"reply_chars": 6.0}
    env.reset(seed=0, options={"task_id": "rev-reward"})
    _, reward, _, _, info = env.step("drawers")
    assert reward == pytest.approx(0.5 * 12 / 13) and info["reward_components"]["exact"] == 0.0
    assert not info["success"]


def test_what_needs_verifiers_own_rollout_loop_is_refused() -> None:
    with pytest.raises(ConfigError, match="needs a runtime.*agent gateway"):
        VerifiersEnv(taskset="vf_tasks:NeedsRuntimeTaskset")
    with pytest.raises(ConfigError, match="cannot load verifiers taskset"):
        VerifiersEnv(taskset="vf_tasks:Missing")


def test_what_one_reply_cannot_play_is_refused_at_construction() -> None:
    with pytest.raises(ConfigError, match="exports its own Env, UserSimEnv: a multi-turn.*agent gateway"):
        VerifiersEnv(taskset="vf_user_sim:ReverseTaskset")
    with pytest.raises(ConfigError, match="image_url content: agentrl trains text-only policies"):
        VerifiersEnv(taskset="vf_tasks:ImageTaskset")
    with pytest.raises(ConfigError, match="endless.*set env.kwargs.limit"):
        VerifiersEnv(taskset="vf_tasks:EndlessTaskset")
    env = VerifiersEnv(taskset="vf_tasks:EndlessTaskset", limit=3)  # bounded by limit: the first three
    assert env.task_ids() == ["end-0", "end-1", "end-2"]
    env.reset(options={"task_id": "end-1"})
    assert env.step("1drawer")[1] == pytest.approx(1.5)


@pytest.mark.slow
def test_trains_two_steps_on_a_verifiers_taskset(tiny_model_dir: Path, tmp_path: Path) -> None:
    env = {"id": "agentrl/Verifiers-v0", "kwargs": {"taskset": "vf_tasks:ReverseTaskset"}}
    records = train_two_steps(run_config(tmp_path, tiny_model_dir, env), "verifiers")
    assert all(r["episode/reward_mean"] >= 0.0 for r in records)
