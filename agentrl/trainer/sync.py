"""Weight sync from the trainer to the inference engine after each update.

Invariant: after ``sync_weights(..., version=step)`` the engine samples from the trainer's weights
and its ``weight_version`` equals the trainer step. Embedded engines get an in-process state dict;
SGLang servers get a safetensors directory (``/update_weights_from_disk``) both sides can read, or,
colocated (``engine.weight_sync: tensor``), the tensors themselves (``/update_weights_from_tensor``).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import torch
from torch import nn

from agentrl.engines.base import InferenceEngine
from agentrl.trainer.distributed import DistInfo, full_state_dict


def write_weights_dir(
    lm: nn.Module, state: dict[str, torch.Tensor], weights_root: Path, version: int, keep: int = 2
) -> Path:
    """Save ``state`` as a Hugging Face model dir ``weights_root/v{version}`` (atomic rename); prune old ones."""
    weights_root.mkdir(parents=True, exist_ok=True)
    final = weights_root / f"v{version:06d}"
    tmp = weights_root / f".tmp-v{version:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    lm.save_pretrained(tmp, state_dict={k: v.cpu() for k, v in state.items()}, safe_serialization=True)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in sorted(p for p in weights_root.glob("v*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


async def sync_weights(
    engine: InferenceEngine | None,
    lm: nn.Module,
    version: int,
    *,
    transport: str,
    weights_root: Path,
    dist: DistInfo = DistInfo(),
) -> float:
    """Push the LM's weights to ``engine`` as ``version``; returns the seconds it took.

    ``transport`` is ``state_dict`` (the in-process engine, or colocated SGLang servers that take the
    tensors through /update_weights_from_tensor; rank 0 holds the engine) or ``disk`` (rank 0 writes
    safetensors and tells the shared servers to load them).
    """
    start = time.perf_counter()
    state = full_state_dict(lm)  # every rank joins the all-gather under FSDP
    if transport == "state_dict":
        if engine is not None:  # under torchrun only rank 0 holds the engine
            await engine.update_weights(state, version=version)
    elif dist.is_main:
        directory = write_weights_dir(lm, state, weights_root, version)
        await engine.update_weights(str(directory), version=version)
    if dist.enabled:
        import torch.distributed as tdist

        tdist.barrier()
    return time.perf_counter() - start
