"""The engine held-out episodes decode with (``eval.precision``): the rollout engine, or a float32 twin of it.

A greedy evaluation in bf16 is not repeatable: which rows share a step changes the rounding of every matmul,
and bf16's rounding is coarse enough to flip the argmax between near-tied tokens, so one model scored 0.13
and 0.17 on the same split in two runs (docs/results/memory-and-speed.md). The twin decodes the trainer's
float32 master weights instead, for the length of one evaluation, while rollouts keep sampling in bf16. It views
most of them, but the q/k/v and gate/up projections are copied into fused buffers of its own (the larger part of
each decoder layer). float32 makes a flipped near-tie far rarer, not impossible: the twin is not batch-invariant
(on CPU it multiplies weight-left up to 8 token rows per step and the usual way above, which rounds otherwise).
Under ``trainer.deterministic`` its requests are seeded from their content, as the rollout engine's are.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import torch

from agentrl.job.run_config import RunConfig
from agentrl.trainer.seeding import SeededEngine
from agentrl.util.heap import trim_heap


def needs_float32_twin(cfg: RunConfig) -> bool:
    """True when ``eval.precision`` asks for float32 and the rollout engine does not already compute in it."""
    return cfg.eval.precision == "float32" and not cfg.engine.samples_like_an_fp32_trainer(cfg.model)


@asynccontextmanager
async def evaluation_engine(
    cfg: RunConfig, rollout_engine: Any, policy: torch.nn.Module, *, threads: int | None = None
) -> AsyncIterator[Any]:
    """Yield the engine to evaluate with: ``rollout_engine`` itself, or (``needs_float32_twin``) a float32 twin
    over ``policy``'s weights, closed and freed on exit (``policy`` must not be updated meanwhile).

    The rollout engine's key/value buffers are released first: it is idle while the twin decodes.
    """
    if not needs_float32_twin(cfg):
        yield rollout_engine
        return
    release = getattr(rollout_engine, "release_memory", None)
    if release is not None:
        await release()
    twin = cfg.engine.build_float32_twin(cfg.model, policy)
    try:
        if threads is not None:
            twin.set_threads(threads)
        if cfg.trainer.deterministic:  # a sampled evaluation repeats, as the rollout engine's requests do
            seeded = SeededEngine(twin, cfg.trainer.seed)
            seeded.set_step(int(getattr(rollout_engine, "step", 0)))
            yield seeded
        else:
            yield twin
    finally:
        await twin.close()
        del twin
        trim_heap()
