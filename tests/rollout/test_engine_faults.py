"""Engine faults during rollouts end in a bounded number of retries and a clear error, never a hang, and
the buffer keeps its last step boundary (the groups collected before the failing step).

The faults are injected and named as such: an engine that aborts every request, an engine that fails
requests while its health check passes, and a key/value copy that raises inside the embedded engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rollout_test_envs import Scratchpad

from agentrl.config.sections import RolloutConfig
from agentrl.engines.base import GenerateResult, SamplingParams, VersionSpan
from agentrl.errors import EngineError, RolloutError
from agentrl.rollout import runner as runner_module
from agentrl.rollout.buffer import RolloutBuffer
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.orchestrator import RolloutOrchestrator

LONG = {"long_tasks": ("task-1", "task-2"), "long_reply_tokens": 64, "reply_tokens": 4, "long_from_turn": 1}


class FaultInjectingEngine:
    """Injected fault: delegates to a real engine until ``fault`` is set; then every request is either
    aborted with no token (``"abort"``) or fails (``"error"``), while health and the rest stay real."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.fault, self.calls = inner, "", 0
        self.semantics = inner.semantics

    async def generate(
        self, input_ids: list[int], sampling: SamplingParams, request_id: str | None = None
    ) -> GenerateResult:
        self.calls += 1
        if self.fault == "error":
            raise EngineError("injected fault: the engine rejected the request")
        if self.fault == "abort":
            await asyncio.sleep(0)  # a real engine answers an abort asynchronously
            version = self.inner.weight_version
            return GenerateResult(request_id or "", [], [], "abort", [VersionSpan(version, 0, 0)], len(input_ids))
        return await self.inner.generate(input_ids, sampling, request_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _orchestrator(engine: Any, tokenizer: Any, buffer: RolloutBuffer | None = None, **cfg: Any) -> RolloutOrchestrator:
    config = RolloutConfig(
        **{"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 64, "max_episode_tokens": 700, **cfg}
    )
    env: Callable[[], Any] = lambda: Scratchpad(num_tasks=4, **LONG)  # noqa: E731
    return RolloutOrchestrator(
        engine, env, tokenizer, config, dataset=TaskDataset.from_env(env(), epochs=1), buffer=buffer
    )


def test_engine_side_aborts_without_tokens_are_retried_a_bounded_number_of_times(
    make_engine: Callable[[], Any], tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner_module, "ABORT_BACKOFF_S", 0.001)

    async def scenario() -> None:
        engine = FaultInjectingEngine(make_engine())
        engine.fault = "abort"
        orch = _orchestrator(engine, tiny_tokenizer, on_failure="fail", partial_rollout=False)
        try:
            with pytest.raises(RolloutError, match="aborted this episode's request 9 times in a row") as info:
                await asyncio.wait_for(orch.collect_step(1), timeout=60)
            assert "engine: EngineError" in str(info.value)
        finally:
            await orch.close()
            await engine.close()

    asyncio.run(scenario())


def test_engine_failures_while_healthy_stop_the_step_after_the_retries_and_keep_the_buffer(
    make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    async def scenario() -> None:
        engine = FaultInjectingEngine(make_engine())
        buffer = RolloutBuffer(tmp_path / "b.sqlite")
        orch = _orchestrator(engine, tiny_tokenizer, buffer, over_sample=2.0, engine_retries=1)
        try:
            first = await orch.collect_step(1)  # the two long tasks' groups are carried in flight
            carried = {g.group_id for g in buffer.load_groups(("inflight",))}
            handed = {g.group_id for g in buffer.load_groups(("handed",))}
            assert len(carried) == 2 and len(handed) == len(first.groups) == 2
            engine.fault, engine.calls = "error", 0
            with pytest.raises(RolloutError) as info:
                await asyncio.wait_for(orch.collect_step(2), timeout=60)
        finally:
            await orch.close()
        message = str(info.value)
        assert "the inference engine failed 2 time(s) in step 2 (rollout.engine_retries=1)" in message
        assert "although its health check passes; last failure: engine: EngineError: injected fault" in message
        # the buffer still holds step 1's boundary: its handed and carried groups, nothing of step 2
        assert buffer.last_step() == 1
        assert {g.group_id for g in buffer.load_groups(("inflight",))} == carried
        assert {g.group_id for g in buffer.load_groups(("handed",))} == handed
        engine.fault = ""  # the engine is fixed: a new job resumes from the boundary
        resumed = _orchestrator(engine, tiny_tokenizer, RolloutBuffer(tmp_path / "b.sqlite"), over_sample=2.0)
        batch = await resumed.collect_step(2)
        assert {e.group_id for g in batch.groups for e in g} == handed  # handed-but-untrained groups come first
        await resumed.close()
        await engine.close()

    asyncio.run(scenario())


def test_a_scheduler_fault_mid_step_is_an_error_not_a_hang(
    make_engine: Callable[[], Any], tiny_tokenizer: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def injected_fault(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected fault")

    async def scenario() -> None:
        engine = make_engine()
        buffer = RolloutBuffer(tmp_path / "b.sqlite")
        orch = _orchestrator(engine, tiny_tokenizer, buffer)
        step = asyncio.create_task(orch.collect_step(1))
        while engine.load()["num_running_reqs"] == 0:
            await asyncio.sleep(0.01)
        # injected fault: every copy of a row's keys/values (a finished or aborted row) raises from now on
        monkeypatch.setattr(engine.runner, "row_kv", injected_fault)
        try:
            with pytest.raises(RolloutError, match=r"failed 1 time\(s\) in step 1 .* and its health check fails"):
                await asyncio.wait_for(step, timeout=60)
            assert buffer.last_step() is None
        finally:
            await orch.close()
            await engine.close()

    asyncio.run(scenario())
