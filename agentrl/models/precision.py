"""Where bfloat16 pays: devices that compute it in hardware.

On a CPU with AVX512-BF16 (or AMX) a bf16 matmul runs several times faster than an fp32 one (4.5x at 2048^3 on
the 2-core AMD EPYC of the README's measurements); on a CPU without them torch emulates bf16, tens of times
slower than fp32 (0.03x measured on an AVX2 EPYC). ``*_if_fast`` settings (``model.dtype: bfloat16_if_fast``,
``trainer.precision: bfloat16_autocast_if_fast``) pick bf16 only where it is fast, so one config runs well on both.
"""

from __future__ import annotations

import functools


@functools.cache
def has_fast_bf16(device: str) -> bool:
    """Whether ``device`` ("cpu", "cuda", "cuda:1") computes bfloat16 in hardware."""
    import torch

    if device.startswith("cuda"):
        return _cuda_has_bf16_units(torch.device(device).index)
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def _cuda_has_bf16_units(index: int | None) -> bool:
    """Compute capability 8 (Ampere) and newer compute bf16 in hardware; torch's ``is_bf16_supported()`` also says
    yes on Volta and Turing (V100, T4), which only emulate it, and asks about the current device, not ``index``."""
    import torch

    if not torch.cuda.is_available():
        return False
    if torch.version.hip:  # torch's own rule for ROCm: AMD GPUs it runs on compute bf16
        return True
    major, _ = torch.cuda.get_device_capability(torch.cuda.current_device() if index is None else index)
    return major >= 8


def describe_bf16(device: str) -> str:
    """One line for logs: whether bf16 is fast on ``device`` and why."""
    if has_fast_bf16(device):
        return f"{device} computes bfloat16 in hardware"
    return f"{device} has no bfloat16 units (torch would emulate it, slower than float32)"
