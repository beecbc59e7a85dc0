"""Contract suite: every registered ``agentrl/*`` environment, made with ``gymnasium.make``."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401 - registers the bundled environments
from agentrl.env import MultiTurnEnv
from agentrl.errors import ConfigError

ENV_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("agentrl/"))
# Keep sandboxed envs on the process backend here: the contract is about the env, not Docker.
KWARGS = {
    "agentrl/CodeExec-v0": {"sandbox": {"kind": "process"}},
    "agentrl/CodeAgent-v0": {"sandbox": {"kind": "process"}},
}
# Adapters of outside components (a server, a Docker image, a taskset) pass check_env in their own tests,
# against the real component: tests/interop/.
ADAPTERS = {
    "agentrl/McpTools-v0": "tests/interop/test_mcp_tools.py",
    "agentrl/OpenEnv-v0": "tests/interop/test_openenv.py",
    "agentrl/Harbor-v0": "tests/interop/test_harbor.py",
    "agentrl/Verifiers-v0": "tests/interop/test_verifiers.py",
    "agentrl/AgentGateway-v0": "tests/gateway/test_gateway_env_api.py",  # needs an agent program
}


def test_bundled_envs_are_registered() -> None:
    assert {"agentrl/CodeExec-v0", "agentrl/ToolUse-v0"} <= set(ENV_IDS)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_env_passes_check_env_and_the_multiturn_contract(env_id: str) -> None:
    if env_id in ADAPTERS:
        pytest.skip(f"{env_id} needs its outside component; check_env runs in {ADAPTERS[env_id]}")
    env = gym.make(env_id, **KWARGS.get(env_id, {}))
    try:
        base = env.unwrapped
        assert isinstance(base, MultiTurnEnv)
        check_env(base, skip_render_check=True)
        task_ids = base.task_ids()
        assert isinstance(task_ids, list) and all(isinstance(t, str) for t in task_ids)
        options = {"task_id": task_ids[0]} if task_ids else None
        first, info = env.reset(seed=5, options=options)
        again, _ = env.reset(seed=5, options=options)
        assert first == again and base.observation_space.contains(first)  # same task for every group member
        json.dumps(info)
        messages, reward, terminated, truncated, step_info = env.step("é 漢字 🙂 not an answer")
        assert base.observation_space.contains(messages) and isinstance(float(reward), float)
        assert isinstance(terminated, bool) and isinstance(truncated, bool)
        json.dumps(step_info)
        for schema in base.tool_schemas():
            assert schema["type"] == "function" and schema["function"]["name"]
        if task_ids:  # an unknown id is a ConfigError naming the closest known one, not a KeyError mid-rollout
            with pytest.raises(ConfigError, match=f"Did you mean '{re.escape(task_ids[0])}'"):
                env.reset(seed=5, options={"task_id": task_ids[0] + "x"})
    finally:
        env.close()
