"""Data parallelism with FSDP2 (``fully_shard``) under torchrun; a no-op world of one otherwise.

Invariant: every rank runs the same number of forward/backward passes per mini-batch (FSDP's
collectives pair up), and per-rank losses are scaled so the averaged gradient equals the
single-process gradient of the whole mini-batch (GSPO.md 2.4: N counts rows over all ranks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the data-parallel world."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0 writes checkpoints, logs and plots."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        """True under torchrun with more than one process."""
        return self.world_size > 1


def init_distributed() -> DistInfo:
    """Join the process group torchrun set up (gloo on CPU, nccl on CUDA); world of one without torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    import torch.distributed as dist

    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend=backend)
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size())


def shard_policy(policy: nn.Module, decoder_layers: nn.ModuleList) -> nn.Module:
    """Apply FSDP2: one unit per decoder layer, then the root (embeddings, norm, head)."""
    from torch.distributed.fsdp import fully_shard

    for layer in decoder_layers:
        fully_shard(layer)
    fully_shard(policy)
    return policy


def decoder_layers_of(lm: nn.Module) -> nn.ModuleList:
    """The transformer blocks of a Hugging Face causal LM (``model.layers`` in Llama/Qwen-style models)."""
    decoder = lm.get_decoder()
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise TypeError(f"{type(lm).__name__} has no decoder.layers ModuleList; FSDP2 wrapping needs the block list")
    return layers


def max_over_ranks(value: int, info: DistInfo) -> int:
    """The largest ``value`` over all ranks (so every rank runs as many micro-batches)."""
    if not info.enabled:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.long)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def max_floats_over_ranks(values: list[float], info: DistInfo) -> list[float]:
    """Element-wise maximum of a list of floats over ranks (for metrics reported as a max)."""
    if not info.enabled or not values:
        return values
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def sum_over_ranks(values: list[float], info: DistInfo) -> list[float]:
    """Element-wise sum of a list of floats over ranks (for metric counts)."""
    if not info.enabled:
        return values
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


def full_state_dict(policy_lm: nn.Module) -> dict[str, torch.Tensor]:
    """The LM's full (unsharded) state dict, detached; under FSDP2 every rank must call it (all-gathers)."""
    out: dict[str, torch.Tensor] = {}
    for name, value in policy_lm.state_dict().items():
        out[name] = (value.full_tensor() if hasattr(value, "full_tensor") else value).detach()
    return out
