"""Dynamic sampling (rollout.dynamic_sampling): groups without learning signal are filtered out and replaced.

Real parts: the embedded engine on the tiny model, the SQLite buffer, the trainer's own advantage scheme
(``agentrl.algos.credit``) as the filter. The env decides which tasks can carry signal: ``flat_tasks`` fail in
every episode, the others pass on an even reply length.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rollout_test_envs import SplitVerdictScratchpad

from agentrl.algos.config import AlgorithmConfig
from agentrl.algos.credit import carries_signal, signal_filter
from agentrl.config.sections import RolloutConfig
from agentrl.errors import ConfigError
from agentrl.rollout.archive import TrajectoryArchive
from agentrl.rollout.buffer import RolloutBuffer
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.orchestrator import RolloutOrchestrator

ALGO = AlgorithmConfig(turn_advantage="outcome")
NUM_TASKS = 16


def _flat_tasks(count: int) -> tuple[str, ...]:
    """The first ``count`` tasks the dataset issues: the step meets them first."""
    dataset = TaskDataset.from_env(SplitVerdictScratchpad(num_tasks=NUM_TASKS), epochs=1)
    return tuple(dataset.task_at(i) for i in range(count))


def _orchestrator(engine: Any, tokenizer: Any, flat: tuple[str, ...], buffer: RolloutBuffer | None, **cfg: Any) -> Any:
    config = RolloutConfig(
        **({"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 6, "max_episode_tokens": 400} | cfg)
    )

    def env() -> SplitVerdictScratchpad:
        return SplitVerdictScratchpad(num_tasks=NUM_TASKS, flat_tasks=flat)

    dataset = TaskDataset.from_env(env(), epochs=1)
    return RolloutOrchestrator(
        engine, env, tokenizer, config, dataset=dataset, buffer=buffer, group_filter=signal_filter(ALGO)
    )


@pytest.mark.parametrize("partial_rollout", [False, True])
def test_groups_without_signal_are_replaced_and_archived(
    partial_rollout: bool, make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    flat = _flat_tasks(3)

    async def scenario() -> None:
        engine = make_engine()
        buffer = RolloutBuffer(tmp_path / "b.sqlite")
        orch = _orchestrator(
            engine, tiny_tokenizer, flat, buffer, dynamic_sampling=True, partial_rollout=partial_rollout
        )
        try:
            batch = await orch.collect_step(1)
            trained = {g[0].task_id for g in batch.groups}
            assert len(batch.groups) == 2 and all(carries_signal(g, ALGO) for g in batch.groups)
            assert not trained & set(flat)  # the all-failed tasks never reach the trainer
            filtered = buffer.load_groups(("filtered",))
            assert {g.task_id for g in filtered} >= set(flat)  # met first, so filtered (and maybe unlucky others)
            assert not any(carries_signal(g.episodes, ALGO) for g in filtered)
            assert all(len(g.episodes) == 4 and g.episodes[0].final_reward is not None for g in filtered)
            assert {g.step for g in filtered} == {1}
            assert batch.metrics["rollout/groups_filtered"] == len(filtered)
            assert batch.metrics["rollout/signal_groups"] == 2
            # the step's success rate counts the filtered groups' episodes too (the trained batch's own leans to 0.5)
            completed = [e for g in batch.groups for e in g] + [e for g in filtered for e in g.episodes]
            expected = sum(e.success for e in completed) / len(completed)
            assert batch.metrics["rollout/success_rate"] == pytest.approx(expected)
            trained_rate = sum(e.success for g in batch.groups for e in g) / 8
            assert batch.metrics["rollout/success_rate"] < trained_rate  # the all-failed tasks pull it down
            orch.commit_step(1)
            moved = TrajectoryArchive(tmp_path).archive(buffer, 1)
            assert moved == 2 + len(filtered) and buffer.load_groups(("filtered",)) == []
        finally:
            await orch.close()
            await engine.close()
            buffer.close()

    asyncio.run(scenario())


def test_a_resumed_job_does_not_reissue_filtered_tasks(
    make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    flat = _flat_tasks(3)

    async def scenario() -> None:
        engine = make_engine()
        buffer = RolloutBuffer(tmp_path / "b.sqlite")
        first = _orchestrator(engine, tiny_tokenizer, flat, buffer, dynamic_sampling=True)
        try:
            await first.collect_step(1)
        finally:
            await first.close()  # the job dies after the boundary of step 1 was written
        first.commit_step(1)
        filtered = {g.task_id for g in buffer.load_groups(("filtered",))}
        assert filtered >= set(flat)
        again = _orchestrator(engine, tiny_tokenizer, flat, buffer, dynamic_sampling=True)
        try:
            batch = await again.collect_step(2)
            assert not {g[0].task_id for g in batch.groups} & filtered
            every = buffer.load_groups(("inflight", "ready", "handed", "trained", "filtered"))
            issued = [g.task_id for g in every]
            assert len(issued) == len(set(issued))  # one epoch: nothing issued twice, filtered tasks included
            assert {g.task_id for g in buffer.load_groups(("filtered",))} >= filtered  # still recorded
        finally:
            await again.close()
            await engine.close()
            buffer.close()

    asyncio.run(scenario())


def test_the_cap_lets_groups_without_signal_train(
    make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    flat = _flat_tasks(3)

    async def scenario() -> None:
        engine = make_engine()
        orch = _orchestrator(
            engine, tiny_tokenizer, flat, None, dynamic_sampling=True, max_filtered_groups=1, partial_rollout=False
        )
        try:
            batch = await orch.collect_step(1)
            assert batch.metrics["rollout/groups_filtered"] == 1
            trained = [g[0].task_id for g in batch.groups]
            # Past the cap groups train as they come; which of the two first issued finishes first is a race.
            assert len(trained) == 2 and len(set(trained)) == 2 and set(trained) <= set(flat)
            assert not any(carries_signal(g, ALGO) for g in batch.groups)
            assert batch.metrics["rollout/signal_groups"] == 0
        finally:
            await orch.close()
            await engine.close()

    asyncio.run(scenario())


def test_off_by_default_and_a_missing_filter_is_a_config_error(
    make_engine: Callable[[], Any], tiny_tokenizer: Any
) -> None:
    flat = _flat_tasks(2)

    async def scenario() -> None:
        engine = make_engine()
        orch = _orchestrator(engine, tiny_tokenizer, flat, None, partial_rollout=False)
        try:
            batch = await orch.collect_step(1)
            assert [g[0].task_id for g in batch.groups] == list(flat)  # trained although neither has signal
            assert batch.metrics["rollout/groups_filtered"] == 0 and batch.metrics["rollout/signal_groups"] == 0
            with pytest.raises(ConfigError, match="rollout.dynamic_sampling needs a group filter"):
                RolloutOrchestrator(
                    engine,
                    SplitVerdictScratchpad,
                    tiny_tokenizer,
                    RolloutConfig(dynamic_sampling=True),
                    dataset=TaskDataset.from_env(SplitVerdictScratchpad(), epochs=1),
                )
        finally:
            await orch.close()
            await engine.close()

    asyncio.run(scenario())
