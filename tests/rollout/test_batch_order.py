"""rollout.batch_order: with partial rollouts, which complete groups a step trains (tiny model, embedded engine).

Two of four tasks reply 16x longer. ``finish`` trains the short groups first; ``start`` trains groups in the
order they were started, whatever their reply lengths, and carries the rest with the tokens they have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from rollout_test_envs import Scratchpad

from agentrl.config.sections import RolloutConfig
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.orchestrator import RolloutOrchestrator

LONG = {"long_tasks": ("task-1", "task-2"), "long_reply_tokens": 64, "reply_tokens": 4, "long_from_turn": 1}


async def _trained_order(engine: Any, tokenizer: Any, batch_order: str) -> tuple[list[list[str]], list[str], float]:
    """Task ids trained at steps 1 and 2, the dataset's task order, and step 1's aborted episodes."""
    cfg = RolloutConfig(
        group_size=2,
        prompts_per_step=2,
        max_new_tokens=64,
        max_episode_tokens=700,
        over_sample=2.0,
        batch_order=batch_order,
    )
    env = lambda: Scratchpad(num_tasks=4, **LONG)  # noqa: E731
    dataset = TaskDataset.from_env(env(), epochs=1)
    orch = RolloutOrchestrator(engine, env, tokenizer, cfg, dataset=dataset, buffer=None)
    trained, aborted = [], 0.0
    for step in (1, 2):
        batch = await orch.collect_step(step)
        trained.append([g[0].task_id for g in batch.groups])
        aborted = aborted or batch.metrics["rollout/episodes_aborted"]
        await engine.update_weights({k: v for k, v in engine.runner.model.state_dict().items()}, version=step)
    await orch.close()
    return trained, [dataset.task_at(i) for i in range(4)], aborted


@pytest.mark.parametrize("batch_order", ["finish", "start"])
def test_batch_order(batch_order: str, make_engine: Callable[[], Any], tiny_tokenizer: Any) -> None:
    async def scenario() -> tuple[list[list[str]], list[str], float]:
        engine = make_engine()
        try:
            return await _trained_order(engine, tiny_tokenizer, batch_order)
        finally:
            await engine.close()

    trained, order, aborted = asyncio.run(scenario())
    assert sorted(trained[0] + trained[1]) == sorted(order)  # every group is trained exactly once
    if batch_order == "finish":
        # The long groups are still running when the short ones fill the step: the over-sampling is real.
        # (Under `start` the two younger groups may or may not finish while the oldest long one runs: a race.)
        assert aborted > 0
        assert sorted(trained[0]) == ["task-0", "task-3"]  # the short ones jump the queue
    else:
        assert set(order[:2]) & set(LONG["long_tasks"])  # a long task was started first: the test can tell
        assert trained == [order[:2], order[2:]]  # start order, however long the replies
