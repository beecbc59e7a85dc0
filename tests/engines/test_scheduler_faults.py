"""Scheduler failures in the embedded engine: every request a failure touches returns an EngineError (none
hangs), the engine keeps serving, and a scheduler thread that dies fails everything and refuses new work.

The faults are injected (``monkeypatch``): a key/value copy that raises, or a loop that raises, cannot be
caused for real on demand.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from engine_harness import build_embedded, wait_running

from agentrl.engines.base import SamplingParams
from agentrl.errors import EngineError

LONG = SamplingParams(max_new_tokens=400, ignore_eos=True)
SHORT = SamplingParams(max_new_tokens=4, ignore_eos=True)


def _injected_fault(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("injected fault")


def _fault_once(original: Callable[..., Any]) -> Callable[..., Any]:
    """Raise on the first call only, then behave as ``original``: the scheduler thread serves the next
    request at once, so a fault left in place until the test thread removes it could hit that one too."""
    calls = 0

    def fault_then_original(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return (_injected_fault if calls == 1 else original)(*args, **kwargs)

    return fault_then_original


def test_a_failed_copy_of_an_aborted_rows_keys_values_fails_its_requests_and_the_engine_recovers(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = build_embedded(tiny_model_dir, max_batch_size=2)

    async def scenario() -> None:
        running = [asyncio.ensure_future(engine.generate([1, 2, 3 + i], LONG)) for i in range(2)]
        await wait_running(engine, 2)
        queued = asyncio.ensure_future(engine.generate([7, 8, 9], SHORT))  # no free row: it waits
        # injected fault: copying an aborted row's keys/values into the prefix cache raises
        monkeypatch.setattr(engine.runner, "row_kv", _fault_once(engine.runner.row_kv))
        rid = engine.active_request_ids()[0]
        await engine.abort([rid])
        for task in running:
            with pytest.raises(EngineError, match="embedded engine step failed: RuntimeError: injected fault"):
                await asyncio.wait_for(task, timeout=30)
        assert (await asyncio.wait_for(queued, timeout=30)).finish_reason == "length"  # untouched: served
        assert await engine.health()
        assert len((await engine.generate([4, 5, 6], SHORT)).output_ids) == 4

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(engine.close())


def test_a_dead_scheduler_thread_fails_every_pending_request_and_refuses_new_ones(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = build_embedded(tiny_model_dir, max_batch_size=1)

    async def scenario() -> None:
        running = asyncio.ensure_future(engine.generate([1, 2, 3], LONG))
        await wait_running(engine, 1)
        waiting = asyncio.ensure_future(engine.generate([4, 5, 6], LONG))
        # injected fault: the loop itself (its admission, outside any one step) raises
        monkeypatch.setattr(engine.scheduler, "_pop_admissible", _injected_fault)
        for task in (running, waiting):
            with pytest.raises(EngineError, match="scheduler stopped: RuntimeError: injected fault"):
                await asyncio.wait_for(task, timeout=30)
        assert not await engine.health()
        with pytest.raises(EngineError, match="scheduler stopped: RuntimeError: injected fault; create a new engine"):
            await engine.generate([1, 2], SHORT)
        with pytest.raises(EngineError, match="scheduler stopped"):
            await engine.update_weights(engine.runner.model.state_dict(), version=1)

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(engine.close())
