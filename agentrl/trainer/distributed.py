"""Data parallelism with FSDP2 (``fully_shard``) under torchrun; a no-op world of one otherwise.

Invariant: every rank runs the same number of forward/backward passes per mini-batch (FSDP's
collectives pair up), and per-rank losses are scaled so the averaged gradient equals the
single-process gradient of the whole mini-batch (docs/algorithm.md#the-divisor-n: N counts rows over all ranks).
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the data-parallel world."""

    rank: int = 0
    world_size: int = 1
    enabled: bool = False  # a process group is up (under torchrun, even with one process)

    @property
    def is_main(self) -> bool:
        """Rank 0 writes checkpoints, logs and plots."""
        return self.rank == 0


# The collective backend per device type. The group always serves CPU tensors (metric and micro-batch
# count reductions, object broadcasts, barriers) through gloo, and the accelerator's tensors (FSDP2's
# all-gathers and reduce-scatters) through its native backend: NCCL alone has no CPU collectives.
ACCELERATOR_BACKENDS: dict[str, str] = {"cuda": "nccl"}
# Select backends as for this device type even when it is absent (tests run the GPU selection on CPU).
DEVICE_ENV = "AGENTRL_DIST_DEVICE"


def process_group_backend(device_type: str, *, native_available: bool = True) -> str:
    """The ``init_process_group`` backend string for a trainer on ``device_type``, e.g. ``cpu:gloo,cuda:nccl``.

    ``native_available=False`` (a CPU build of torch) maps the accelerator to gloo: the same device map,
    run where its native backend does not exist.
    """
    pairs = {"cpu": "gloo"}
    if device_type != "cpu":
        if device_type not in ACCELERATOR_BACKENDS:
            raise ValueError(f"no collective backend known for device type {device_type!r}; known: cpu, cuda")
        pairs[device_type] = ACCELERATOR_BACKENDS[device_type] if native_available else "gloo"
    return ",".join(f"{device}:{backend}" for device, backend in pairs.items())


def launched_by_torchrun() -> bool:
    """True when torchrun (or another launcher setting its variables) started this process."""
    return "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ and "RANK" in os.environ


def init_distributed() -> DistInfo:
    """Join the process group torchrun set up; a world of one without torchrun.

    Under torchrun the group serves CPU and accelerator tensors (``process_group_backend``), even with one
    process, so a one-GPU run takes the same collective paths as eight.
    """
    if not launched_by_torchrun():
        return DistInfo()
    import torch.distributed as dist

    if not dist.is_initialized():
        device_type = os.environ.get(DEVICE_ENV) or ("cuda" if torch.cuda.is_available() else "cpu")
        if device_type == "cuda" and torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))  # before init: NCCL binds the device
        native = device_type == "cpu" or (torch.cuda.is_available() and dist.is_nccl_available())
        dist.init_process_group(backend=process_group_backend(device_type, native_available=native))
    return DistInfo(rank=dist.get_rank(), world_size=dist.get_world_size(), enabled=True)


def close_distributed() -> None:
    """Leave the process group after a clean end, every rank at the same point.

    Without it the group is torn down during interpreter finalisation, where gloo's worker threads can
    abort the process ("terminate called without an active exception", pytorch/pytorch#190489). The
    barrier keeps rank 0, which hosts the store, from leaving while another rank still talks to it. Call it
    only on a clean or agreed end: after a failure on one rank the barrier would wait for ranks that are
    gone (torchrun tears the others down).

    Call it after the sharded model is dropped: FSDP2 modules sit in reference cycles, so the collection here
    frees them while the interpreter is whole rather than during its finalisation; DTensor's caches, which
    would keep the mesh and its group alive past destroy_process_group, are emptied first.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        gc.collect()  # unreachable FSDP modules go now, not during interpreter finalisation
        _clear_dtensor_caches()
        dist.barrier()
        dist.destroy_process_group()
        gc.collect()


def _clear_dtensor_caches() -> None:
    """Empty DTensor's sharding-propagation caches (Python and C++), whose entries hold the FSDP device
    mesh and through it the process group: without this the group outlives destroy_process_group and
    gloo's threads are torn down during interpreter finalisation after all."""
    try:
        from torch.distributed.tensor.debug import _clear_sharding_prop_cache
    except ImportError:  # a torch without DTensor's debug module: nothing cached to clear
        return
    _clear_sharding_prop_cache()


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
