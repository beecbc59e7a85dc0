"""Reward-hack flags an env reports (``info["hack_flags"]``): recorded on the turn and the episode, kept by the
buffer and the archive, counted as ``reward/hack_suspect_frac``, shown (and filtered) by ``agentrl inspect``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rollout_test_envs import FlaggingScratchpad

from agentrl.cli.main import main
from agentrl.config.sections import RolloutConfig
from agentrl.env import hack_flags
from agentrl.errors import RolloutError
from agentrl.rollout.archive import TrajectoryArchive
from agentrl.rollout.buffer import RolloutBuffer, StoredGroup
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.orchestrator import RolloutOrchestrator
from agentrl.trainer.episode_stats import episode_metrics
from agentrl.trajectory import Episode


def _collect(make_engine: Callable[[], Any], tokenizer: Any, **env_kwargs: Any) -> list[list[Episode]]:
    """The groups of one step, dropped ones (an episode failed) last."""

    def env() -> FlaggingScratchpad:
        return FlaggingScratchpad(num_tasks=2, turns=2, **env_kwargs)

    cfg = RolloutConfig(
        group_size=2, prompts_per_step=2, max_new_tokens=4, max_episode_tokens=400, partial_rollout=False
    )

    async def scenario() -> list[list[Episode]]:
        engine = make_engine()
        orch = RolloutOrchestrator(engine, env, tokenizer, cfg, dataset=TaskDataset.from_env(env(), epochs=1))
        batch = await orch.collect_step(1)
        await orch.close()
        await engine.close()
        return [list(group) for group in [*batch.groups, *batch.dropped]]

    return asyncio.run(scenario())


def test_flags_reach_the_episode_the_metrics_the_buffer_and_inspect(
    make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    groups = _collect(make_engine, tiny_tokenizer)
    flagged = [e for g in groups for e in g if e.hack_flags]
    assert {e.task_id for e in flagged} == {"task-0"} and len(flagged) == 2
    assert flagged[0].hack_flags == ["introspection: sys._getframe", "signal: os.kill"]
    assert (
        flagged[0].turns[0].info["hack_flags"] == flagged[0].hack_flags and "hack_flags" not in flagged[0].turns[1].info
    )
    assert episode_metrics(groups)["reward/hack_suspect_frac"] == 0.5
    # The buffer and then the archive (where trained groups go) keep them.
    buffer = RolloutBuffer(tmp_path / "rollout_buffer.sqlite")
    stored = [StoredGroup(f"g{i}", g[0].task_id, i, "trained", 1, g) for i, g in enumerate(groups)]
    buffer.write_boundary(1, stored, {"cursor": 1})
    reloaded = [e for g in buffer.load_groups(("trained",)) for e in g.episodes]
    assert [e.hack_flags for e in reloaded] == [e.hack_flags for g in groups for e in g]
    assert TrajectoryArchive(tmp_path).archive(buffer, 1) == 2
    buffer.close()
    archived = [e for g in TrajectoryArchive(tmp_path).load_groups() for e in g.episodes]
    assert [e.hack_flags for e in archived] == [e.hack_flags for g in groups for e in g]
    assert main(["inspect", str(tmp_path), "--flagged"]) == 0
    out = capsys.readouterr().out
    assert "HACK SUSPECT: introspection: sys._getframe; signal: os.kill" in out and "task task-1" not in out
    assert "2 flagged for reward hacking" in out


def test_a_malformed_flags_value_fails_the_episode_with_the_fix(
    make_engine: Callable[[], Any], tiny_tokenizer: Any
) -> None:
    groups = _collect(make_engine, tiny_tokenizer, bad_flags=True)
    failed = [e for g in groups for e in g if e.status == "failed"]
    assert failed and all(
        "hack_flags" in (e.error or "") and "list of 'kind: detail' strings" in (e.error or "") for e in failed
    )
    with pytest.raises(RolloutError):
        hack_flags({"hack_flags": [1]})
    assert hack_flags({}) == []
