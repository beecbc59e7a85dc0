"""An episode the env could not score for a reason outside the policy (``info['infra_failure']``) is kept,
counted (``rollout/infra_failures``) and left out of the loss: zero advantage, its group's advantages computed
over the other episodes, none of the step's reward means. (tests/envs/test_grading_infra_failure.py causes
the failure for real, killing grading containers; here a test env reports it through the same key.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from rollout_test_envs import InfraFailingScratchpad

from agentrl.algos.config import AlgorithmConfig
from agentrl.algos.credit import turn_advantages_of
from agentrl.config.sections import RolloutConfig
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.orchestrator import RolloutOrchestrator
from agentrl.trainer.batch import build_rows
from agentrl.trainer.episode_stats import episode_metrics

GROUP = 4


def test_an_infrastructure_failure_is_counted_and_left_out_of_the_loss(
    make_engine: Callable[[], Any], tiny_tokenizer: Any
) -> None:
    InfraFailingScratchpad.stepped.clear()
    cfg = RolloutConfig(group_size=GROUP, prompts_per_step=2, max_new_tokens=8, max_episode_tokens=700, temperature=1.0)

    async def scenario() -> Any:
        engine = make_engine()
        try:
            dataset = TaskDataset.from_env(InfraFailingScratchpad(num_tasks=2), epochs=1)
            orch = RolloutOrchestrator(
                engine, lambda: InfraFailingScratchpad(num_tasks=2), tiny_tokenizer, cfg, dataset=dataset
            )
            return await orch.collect_step(1)
        finally:
            await engine.close()

    batch = asyncio.run(scenario())
    groups = [list(g) for g in batch.groups]
    assert batch.metrics["rollout/infra_failures"] == 1.0
    failed = [e for g in groups for e in g if e.infra_failure]
    assert len(failed) == 1 and failed[0].task_id == "task-0" and failed[0].final_reward is None  # kept, not a 0
    assert "the judge was lost" in (failed[0].infra_failure or "")

    algo = AlgorithmConfig()
    rows = build_rows(groups, GROUP, algo, 1)
    episodes = [e for g in groups for e in g]
    index = episodes.index(failed[0])
    assert not rows[index].trainable  # no gradient from it
    group = next(g for g in groups if failed[0] in g)
    kept = [e for e in group if not e.infra_failure]
    expected = turn_advantages_of(kept, len(kept), algo)  # the group's advantages over the rest
    got = turn_advantages_of(group, GROUP, algo)
    assert [a for e, a in zip(group, got) if not e.infra_failure] == expected
    assert any(a != 0.0 for turns in expected for a in turns), "the group should carry signal without it"
    rewards = [e.final_reward for e in episodes if e is not failed[0]]
    assert episode_metrics(groups)["episode/reward_mean"] == pytest.approx(sum(rewards) / len(rewards))
