"""The gateway records what the env path records: the same exchange as an agent program and as a MultiTurnEnv.

``CalcEnv`` plays ``gateway_agents.calc_agent``'s side of the conversation turn for turn (same system prompt,
tools, tool results and grading). Both run on the same engine with content-seeded requests, so equal
prompts sample equal tokens; the token segments (ids, logprobs, masks, turn ids, versions), turns and rewards
must be identical.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from gateway_agents import SYSTEM, TOOLS, multiply
from gateway_harness import gateway, orchestrator, rollout_config
from taught_model import calc_tasks

from agentrl.env import MultiTurnEnv, StepResult
from agentrl.tools.toolcall import parse_tool_calls
from agentrl.trajectory import Episode

pytest.importorskip("openai", reason="needs the openai client: pip install 'agentrl[gateway]'")


class CalcEnv(MultiTurnEnv):
    """calc_agent's loop as an environment."""

    max_turns = 3

    def __init__(self) -> None:
        self.tasks = {t["task_id"]: t for t in calc_tasks()}
        self.task: dict[str, Any] = {}
        self.turn = 0

    def task_ids(self) -> list[str]:
        return list(self.tasks)

    def tool_schemas(self) -> list[dict[str, Any]]:
        return TOOLS

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list, dict]:
        super().reset(seed=seed)
        self.task, self.turn = self.tasks[(options or {})["task_id"]], 0
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": self.task["question"]}], {
            "max_new_tokens": 40
        }

    def step(self, action: str) -> StepResult:
        calls = [c for c in parse_tool_calls(action) if c.ok]
        self.turn += 1
        if not calls:
            reward = float(action.strip() == str(self.task["answer"]))
            return [], reward, True, False, {"reward_components": {}}
        results = [
            {"role": "tool", "content": str(multiply(**c.arguments)), "tool_call_id": f"call_{self.turn - 1}_{i}"}
            for i, c in enumerate(calls)
        ]
        return results, 0.0, False, self.turn >= self.max_turns, {"max_new_tokens": 40}


def _episodes(model_dir: Path, factory: Any) -> dict[str, Episode]:
    async def main() -> dict[str, Episode]:
        async with orchestrator(model_dir, factory, rollout_config(temperature=0.5), seed=7) as orch:
            batch = await orch.collect_step(1)
        return {group[0].task_id: group[0] for group in batch.groups}

    return asyncio.run(main())


def test_gateway_tokens_logprobs_and_versions_equal_the_env_paths(taught_model_dir: Path) -> None:
    by_env = _episodes(taught_model_dir, CalcEnv)
    by_agent = _episodes(taught_model_dir, gateway("gateway_agents:calc_agent", calc_tasks()))
    assert sorted(by_env) == sorted(by_agent) == sorted(t["task_id"] for t in calc_tasks())
    for task_id, env_episode in by_env.items():
        agent_episode = by_agent[task_id]
        assert len(agent_episode.turns) == len(env_episode.turns) == 2  # a tool call, then the answer
        assert agent_episode.segments == env_episode.segments  # ids, logprobs, loss mask, turn ids, versions
        assert agent_episode.messages == env_episode.messages
        for ours, theirs in zip(agent_episode.turns, env_episode.turns):
            assert (ours.action, ours.reward, ours.num_tokens, ours.finish_reason, ours.max_new_tokens) == (
                theirs.action,
                theirs.reward,
                theirs.num_tokens,
                theirs.finish_reason,
                theirs.max_new_tokens,
            )
            assert ours.env_messages == theirs.env_messages
        assert agent_episode.final_reward == env_episode.final_reward == 1.0
        assert agent_episode.outcome is env_episode.outcome is None  # R is the return, as on the env path
