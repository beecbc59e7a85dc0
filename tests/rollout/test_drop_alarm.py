"""The drop-rate alarm (rollout.on_failure: drop) and the env contract at the runner, with the embedded engine:
an env that fails every episode stops the step with its last errors instead of dropping groups forever."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from buggy_envs import Healthy, StepRaises, StrObservation, WrongTuple
from rollout_test_envs import FlakyScratchpad, Scratchpad

from agentrl.config.sections import RolloutConfig
from agentrl.errors import RolloutError
from agentrl.rollout.buffer import RolloutBuffer
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.drop_alarm import DropAlarm
from agentrl.rollout.orchestrator import RolloutOrchestrator
from agentrl.trajectory import Episode

STEP_LIMIT_S = 120.0  # without the alarm these steps never end: the bound turns a hang into a failure


def _cfg(**kwargs: Any) -> RolloutConfig:
    base = {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 4, "max_episode_tokens": 256}
    return RolloutConfig(**(base | kwargs))


def _failed(error: str) -> Episode:
    return Episode(episode_id="e", task_id="t", group_id="g", status="failed", error=error)


def test_the_alarm_fires_once_the_step_rate_is_certain_to_pass_the_limit() -> None:
    alarm = DropAlarm(0.5, groups_per_step=4)  # a full step may drop 4 (4 / (4 + 4) = 0.5)
    groups = [[_failed(f"env: KeyError: {i}")] for i in range(5)]
    assert alarm.tolerated == 4 and alarm.problem(groups[:4]) is None
    problem = alarm.problem(groups)
    assert problem is not None and problem.startswith("5 groups were dropped this step so far")
    assert "Last errors: env: KeyError: 4 | env: KeyError: 3 | env: KeyError: 2." in problem
    assert "rollout.max_drop_rate=0.5" in problem
    assert alarm.problem(groups[:3], trained=2) is not None and alarm.problem(groups[:2], trained=2) is None
    assert DropAlarm(1.0, 4).problem(groups * 10, trained=0) is None  # 1 never stops the run
    assert DropAlarm(0.0, 4).problem(groups[:1]) is not None  # 0 tolerates no drop


def _collect(make_engine: Callable[[], Any], tokenizer: Any, env: Callable[[], Any], cfg: RolloutConfig, path: Path):
    async def scenario() -> tuple[Any, RolloutBuffer]:
        engine = make_engine()
        buffer = RolloutBuffer(path)
        orch = RolloutOrchestrator(
            engine, env, tokenizer, cfg, dataset=TaskDataset.from_env(env(), seed=0), buffer=buffer
        )
        try:
            return await asyncio.wait_for(orch.collect_step(1), STEP_LIMIT_S), buffer
        finally:
            await orch.close()
            await engine.close()

    return asyncio.run(scenario())


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (StepRaises, r"env: StepRaises\.step raised KeyError: 'answer'"),
        (
            StrObservation,
            r"StrObservation\.reset broke the env contract: the observation is 'What is 2 \+ 2\?' \(a str\)",
        ),
        (WrongTuple, r"WrongTuple\.step broke the env contract: it returned \(\[\], 1\.0, True, \{\}\) \(a tuple\)"),
    ],
)
def test_an_env_that_fails_every_episode_stops_the_first_step(
    env: Any, expected: str, make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    with pytest.raises(RolloutError, match=expected) as caught:
        _collect(make_engine, tiny_tokenizer, env, _cfg(), tmp_path / "b.sqlite")
    # Groups that fail in the same event-loop turn are counted together, so the alarm may see 3 or more.
    dropped = re.match(r"(\d+) groups were dropped this step so far", str(caught.value))
    assert dropped is not None and int(dropped.group(1)) >= 3, str(caught.value)
    assert "rollout.max_drop_rate" in str(caught.value)
    buffer = RolloutBuffer(tmp_path / "b.sqlite")
    assert buffer.last_step() is None  # nothing half-written: the file is fine, not "corrupted"
    buffer.close()


def test_the_healthy_twin_and_a_rare_failure_pass(
    make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    batch, buffer = _collect(make_engine, tiny_tokenizer, Healthy, _cfg(), tmp_path / "a.sqlite")
    assert len(batch.groups) == 2 and batch.metrics["rollout/drop_rate"] == 0.0
    buffer.close()
    first = TaskDataset.from_env(Scratchpad(num_tasks=4)).task_at(0)
    env = lambda: FlakyScratchpad(num_tasks=4, fail_tasks=(first,))  # noqa: E731
    cfg = _cfg(partial_rollout=False, max_new_tokens=8, max_episode_tokens=700)
    batch, buffer = _collect(make_engine, tiny_tokenizer, env, cfg, tmp_path / "b.sqlite")
    assert len(batch.dropped) == 1 and batch.metrics["rollout/drop_rate"] == pytest.approx(1 / 3)
    buffer.close()
