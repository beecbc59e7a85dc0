"""Weight sync from the trainer to the inference engine after each update.

Invariant: after ``sync_weights(..., version=step)`` the engine samples from the trainer's weights
and its ``weight_version`` equals the trainer step. How the weights travel (an in-process state
dict, tensors, a safetensors directory, or nothing when the engine shares the trainer's parameters) is
the engine backend's ``WeightTransport``, chosen once per job by ``session_transport``.
"""

from __future__ import annotations

import time
from pathlib import Path

from torch import nn

from agentrl.engines.base import InferenceEngine
from agentrl.engines.transport import WeightTransport
from agentrl.job.run_config import RunConfig
from agentrl.trainer.distributed import DistInfo, full_state_dict


def session_transport(cfg: RunConfig, run_dir: Path, dist: DistInfo) -> WeightTransport:
    """How this job's weights reach its engine: the backend's colocated transport when the trainer never updates
    while the engine samples (``trainer.mode: sync``, one process) and the backend has one (the embedded engine
    then samples from the trainer's own parameters), else the backend's ``weight_transport``."""
    colocated = None
    if cfg.trainer.mode == "sync" and not dist.enabled:
        colocated = cfg.engine.colocated_transport(cfg.model)
    return colocated or cfg.engine.weight_transport(run_dir)


async def sync_weights(
    engine: InferenceEngine | None,
    lm: nn.Module,
    version: int,
    *,
    transport: WeightTransport,
    dist: DistInfo = DistInfo(),
) -> float:
    """Push the LM's weights to ``engine`` as ``version`` through ``transport``; returns the seconds it took.

    Every rank joins the all-gather of the full state dict (FSDP); under torchrun only rank 0 holds
    the engine, and the ranks meet at a barrier afterwards.
    """
    start = time.perf_counter()
    state = full_state_dict(lm)
    await transport.deliver(engine, lm, state, version, is_main=dist.is_main)
    if dist.enabled:
        import torch.distributed as tdist

        tdist.barrier()
    return time.perf_counter() - start
