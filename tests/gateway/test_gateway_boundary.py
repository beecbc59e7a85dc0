"""A step boundary in the middle of an agent's model call: the request is held open, the episode is partial,
and the same request is answered after the resume (a weight update in between), with every token recorded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import gateway_agents
import pytest
from gateway_harness import gateway, orchestrator, rollout_config

pytest.importorskip("openai", reason="needs the openai client: pip install 'agentrl[gateway]'")

TASKS = [
    {"task_id": "short", "question": "Hi", "calls": 2, "max_tokens": 3},
    {"task_id": "long", "question": "Tell me a long story", "calls": 2, "max_tokens": 300},
]


def test_a_boundary_holds_the_request_and_the_resume_answers_it(tiny_model_dir: Path) -> None:
    gateway_agents.RECEIVED.clear()
    rollout = rollout_config(prompts_per_step=1, partial_rollout=True, over_sample=2.0, max_new_tokens=300)

    async def main() -> None:
        async with orchestrator(tiny_model_dir, gateway("gateway_agents:chatty_agent", TASKS), rollout) as orch:
            first = await orch.collect_step(1)
            assert [[e.task_id for e in group] for group in first.groups] == [["short"]]
            [runner] = [r for group in orch._groups for r in group.runners]
            held = runner.episode
            assert held.task_id == "long" and held.status == "partial"
            assert held.turns[-1].finish_reason == "abort" and 0 < held.turns[-1].num_tokens < 300
            assert runner.conversation.pending is not None and gateway_agents.RECEIVED["long"] == []  # still open
            engine = orch.engine
            await engine.update_weights(engine.inner.runner.model.state_dict(), 1)  # the trainer's sync
            second = await orch.collect_step(2)
        [[done]] = second.groups
        assert done is held and done.status == "complete" and done.resumed == 1
        turn = done.turns[0]
        ids = [
            t
            for t, m, k in zip(done.segment.completion_ids, done.segment.loss_mask, done.segment.turn_ids)
            if m and k == 0
        ]
        logprobs = [
            lp for lp, m, k in zip(done.segment.logprobs, done.segment.loss_mask, done.segment.turn_ids) if m and k == 0
        ]
        versions = {
            v for v, m, k in zip(done.segment.versions, done.segment.loss_mask, done.segment.turn_ids) if m and k == 0
        }
        reply = gateway_agents.RECEIVED["long"][0]  # the agent's first call, answered across the boundary
        assert reply.choices[0].message.content == turn.action and len(ids) == turn.num_tokens > 0
        assert [entry.logprob for entry in reply.choices[0].logprobs.content] == logprobs
        assert versions == {0, 1} and reply.model_extra["metadata"]["weight_version"] == "1"
        assert len(gateway_agents.RECEIVED["long"]) == 2 and len(done.turns) == 2

    asyncio.run(main())
