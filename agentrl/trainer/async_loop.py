"""Asynchronous training (``trainer.mode: async``), one step off: step k+1's rollouts overlap step k's update.

Structure: the update of step k runs in a worker thread (``asyncio.to_thread``; torch releases the
GIL in its kernels) while the event loop drives the orchestrator collecting step k+1 against the
engine, which still holds version k-1. Both finish, then ``end_step`` pushes version k to the engine
(no request is in flight: a collection ends with its partials aborted), commits, archives and
checkpoints step k. Step k+1's fresh tokens are therefore trained with lag 1; carried partial
episodes are admitted by the staleness bound judged at the version that will train them
(``orchestrator.version_lead``). Durability order: step k+1's buffer boundary (handed groups, the
dataset cursor) is written before step k's commit and checkpoint, so the checkpoint of step k
carries step k+1's batch as handed and a ``--resume`` trains it first (see ``step_end``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.errors import ConfigError
from agentrl.trainer.batch import build_rows
from agentrl.trainer.boundary import StepBoundaries
from agentrl.trainer.seeding import SeededEngine
from agentrl.trainer.step_end import StepOutcome, end_step


@dataclass
class _Collected:
    """One collection: its groups and metrics, and when it ran (for the overlap)."""

    groups: list[list[Any]]
    metrics: dict[str, float]
    exhausted: bool
    span: tuple[float, float]


@dataclass
class _Updated:
    """One update's metrics and when it ran."""

    metrics: dict[str, float]
    span: tuple[float, float]


async def _collect(s: Any, step: int, lead: int) -> _Collected:
    start = time.perf_counter()
    if isinstance(s.engine, SeededEngine):
        s.engine.set_step(step)
    s.orchestrator.version_lead = lead
    batch = await s.orchestrator.collect_step(step)
    return _Collected(batch.groups, batch.metrics, batch.exhausted, (start, time.perf_counter()))


def threads_for(mode: str, threads: int | None, available: int) -> int | None:
    """torch threads per busy side: ``threads``, else None (torch's default) in sync, half of ``available`` in async."""
    if threads is not None:
        return threads
    return max(1, available // 2) if mode == "async" else None


def _update(s: Any, rows: list[Any], step: int, threads: int, engine_idle: threading.Event) -> _Updated:
    """Step ``step``'s update on ``threads`` cores, widened to ``s.cores`` (when set) at the first micro-batch
    that starts after ``engine_idle``: cores the finished collection no longer uses would otherwise sit idle
    for the rest of the update (on 2 cores an update-bound job ran 1.29x slower in async without this)."""
    torch.set_num_threads(threads)  # this worker thread's share of the cores
    widened = 0

    def widen() -> None:
        nonlocal widened
        if s.cores is not None and engine_idle.is_set() and torch.get_num_threads() < s.cores:
            torch.set_num_threads(s.cores)
        widened += int(torch.get_num_threads() > threads)

    s.updater.before_micro_batch = widen
    start = time.perf_counter()
    try:
        metrics = s.updater.update(rows, audit=s.cfg.algorithm.audit_due(step), version=step - 1)
    finally:
        s.updater.before_micro_batch = None
    metrics["async/widened_micro_batches"] = float(widened)
    return _Updated(metrics, (start, time.perf_counter()))


def engine_threads(s: Any, threads: int) -> None:
    """Give an in-process engine ``threads`` torch threads (a no-op for remote engines or pinned threads)."""
    setter = getattr(s.engine, "set_threads", None)
    if setter is not None and s.cores is not None:
        setter(threads)


async def _overlapped(s: Any, step: int, rows: list[Any], collect_next: bool) -> tuple[_Updated, _Collected | None]:
    """Update ``step`` in a thread while the event loop collects ``step + 1`` (when asked). Each side runs on
    its share of the cores while both are busy and takes every core once the other is done."""
    engine_idle = threading.Event()
    share = torch.get_num_threads()
    collect = None
    if collect_next:
        engine_threads(s, share)
        collect = asyncio.ensure_future(_collect(s, step + 1, lead=1))
        collect.add_done_callback(lambda _: engine_idle.set())
    else:
        engine_idle.set()  # nothing to collect (the last step): the update may take every core at once
    update = asyncio.ensure_future(asyncio.to_thread(_update, s, rows, step, share, engine_idle))
    # The engine's remaining forwards (the update finished first) or the next ones (eval, step 1) get every core.
    update.add_done_callback(lambda _: engine_threads(s, s.cores))
    tasks = [t for t in (update, collect) if t is not None]
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    failed = [t for t in done if t.exception() is not None]
    if failed:
        if collect is not None and not collect.done():
            collect.cancel()  # the update failed: stop generating (the buffer keeps the last boundary)
        await asyncio.wait([update])  # a thread cannot be cancelled: let it finish before the job unwinds
        if collect is not None:
            await asyncio.wait([collect])
        raise failed[0].exception()  # type: ignore[misc]
    await asyncio.wait(tasks)
    return update.result(), collect.result() if collect is not None else None


def overlap_metrics(updated: _Updated, collected: _Collected | None, train: dict[str, float]) -> dict[str, float]:
    """Seconds the trainer and the engine were busy at once, and the fraction of tokens lost to staleness."""
    (u0, u1) = updated.span
    out = {"perf/update_s": u1 - u0, "perf/collect_s": 0.0, "perf/overlap_s": 0.0}
    if collected is not None:
        c0, c1 = collected.span
        out["perf/collect_s"] = c1 - c0
        out["perf/overlap_s"] = max(0.0, min(u1, c1) - max(u0, c0))
    return out


def stale_dropped_fraction(rollout: dict[str, float], train: dict[str, float]) -> float:
    """Tokens dropped for staleness (restarted partials, masked stale tokens) over those plus the trained ones."""
    dropped = rollout.get("rollout/stale_discarded_tokens", 0.0) + train.get("train/stale_masked_tokens", 0.0)
    return dropped / max(dropped + train.get("train/trained_tokens", 0.0), 1.0)


async def run_async_loop(s: Any, boundaries: StepBoundaries) -> list[dict[str, Any]]:
    """One-step-off training: the first batch is collected alone, every later one during the previous update."""
    if s.dist.enabled:
        raise ConfigError("trainer.mode 'async' runs in one process; use trainer.mode: sync under torchrun")
    cfg, total = s.cfg, s.cfg.trainer.steps
    step = s.start_step + 1
    if step > total:
        return s.reporter.history
    started = time.perf_counter()  # step 1's time includes its own collection, as in sync mode
    current = await _collect(s, step, lead=0)  # nothing to overlap with: the engine holds the trainer's weights
    while current.groups:
        rows = build_rows(current.groups, cfg.rollout.group_size, cfg.algorithm, current_version=step - 1)
        collect_next = step < total and not current.exhausted
        updated, following = await _overlapped(s, step, rows, collect_next)
        extra = overlap_metrics(updated, following, updated.metrics)
        extra["async/stale_dropped_frac"] = stale_dropped_fraction(current.metrics, updated.metrics)
        outcome = StepOutcome(step, current.groups, current.metrics, updated.metrics, current.exhausted, started, extra)
        if await end_step(s, outcome, boundaries) or following is None:
            break
        step, current, started = step + 1, following, time.perf_counter()
    return s.reporter.history
