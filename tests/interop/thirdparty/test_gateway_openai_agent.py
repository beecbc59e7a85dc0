"""AgentGateway-v0 with an agent program that uses ``openai.AsyncOpenAI`` from its own venv (a command agent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gymnasium.utils.env_checker import check_env
from interop_harness import run_config, train_two_steps
from thirdparty_env import component

from agentrl.gateway.env import AgentGatewayEnv

HERE = Path(__file__).resolve().parent
TASKS = [
    {"task_id": f"cap-{c}", "question": f"What is the capital of {c}?", "answer": a}
    for c, a in [("France", "paris"), ("Peru", "lima"), ("Japan", "tokyo"), ("Kenya", "nairobi")]
]


def agent() -> dict[str, Any]:
    """The program run per episode by the venv's own interpreter, its task as one JSON line on stdin."""
    python = component("openai-agent") / "bin" / "python"
    return {"kind": "command", "command": [str(python), str(HERE / "openai_agent.py")], "task_input": "stdin"}


def test_the_agents_own_grade_is_the_reward() -> None:
    env = AgentGatewayEnv(agent=agent(), tasks=TASKS, max_turns=2)
    try:
        check_env(env, skip_render_check=True)
        messages, _ = env.reset(options={"task_id": "cap-Peru"})
        assert messages[-1] == {"role": "user", "content": "What is the capital of Peru?"}
        _, reward, terminated, _, info = env.step("Lima")
        assert (reward, terminated, info["success"]) == (1.0, True, True)
        env.reset(options={"task_id": "cap-Peru"})
        _, reward, terminated, _, info = env.step("Cusco")
        assert (reward, terminated, info["success"]) == (0.0, True, False)
    finally:
        env.close()


@pytest.mark.slow
def test_trains_two_steps_through_the_gateway(tiny_model_dir: Path, tmp_path: Path) -> None:
    env = {"id": "agentrl/AgentGateway-v0", "kwargs": {"agent": agent(), "tasks": TASKS, "max_turns": 2}}
    records = train_two_steps(run_config(tmp_path, tiny_model_dir, env), "openai-agent")
    assert all(0.0 <= r["episode/reward_mean"] <= 1.0 for r in records)
