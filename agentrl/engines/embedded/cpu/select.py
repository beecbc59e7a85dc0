"""``select``: the CPU kernel set for one engine, chosen at run time from the CPU's flags, the model and the settings.

In order: SGLang's kernels for bf16 where they load and take every projection shape (with agentrl's own matmul,
attention and C++ decode loop where those build: ``engine.native_kernels``); else, for fp32, the portable C++ decode
loop where it builds (``engine.native_kernels`` again: it is agentrl's own kernel too); else torch ops, with bf16
weights in oneDNN's packed layout where that works (``engine.pack_weights``). A setting that requires what cannot
run here is an error naming why; ``CpuKernels.problems`` says why each faster set was not chosen.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentrl.engines.embedded.config import CpuKernelsSetting, NativeKernelsSetting
from agentrl.engines.embedded.cpu.kernels import CpuKernels, PortableKernels, SglangKernels, TorchOps
from agentrl.engines.embedded.cpu.native import HEAD_DIMS, native_problem, shape_problem
from agentrl.engines.embedded.cpu.native_loop import NativeBf16Loop
from agentrl.engines.embedded.cpu.packed_weights import packing_problem
from agentrl.engines.embedded.cpu.portable import PortableFp32Loop, own_matmul_rows, portable_problem
from agentrl.engines.embedded.cpu.sglang import SglangCpuKernels, kernels_problem, shapes_problem
from agentrl.errors import EngineConfigError


@dataclass(frozen=True)
class KernelSettings:
    """The engine's kernel settings (``engine.cpu_kernels``, ``engine.native_kernels``, ``engine.pack_weights``)."""

    cpu_kernels: CpuKernelsSetting = "auto"
    native_kernels: NativeKernelsSetting = "auto"
    pack_weights: bool | None = None


@dataclass(frozen=True)
class ModelShape:
    """What the selection needs to know of the model: dtype, device, head_dim, every projection's ``(out, in)``, and
    why the lean forward cannot run it (None when it can)."""

    dtype: torch.dtype
    device: torch.device
    head_dim: int
    shapes: frozenset[tuple[int, int]]
    lean_reason: str | None = None


def select(model: ModelShape, settings: KernelSettings) -> CpuKernels:
    """The kernel set for ``model`` under ``settings`` (raises ``EngineConfigError`` when a setting requires a set
    that cannot run here)."""
    problems: dict[str, str | None] = {"pack": packing_problem(model.dtype, model.device)}
    if settings.pack_weights and problems["pack"] is not None:
        raise EngineConfigError(
            f"pack_weights is on but {problems['pack']}; set engine.pack_weights to null (auto) or false"
        )
    problems["sglang"] = _sglang_problem(model, settings.cpu_kernels)
    if settings.cpu_kernels == "sglang" and problems["sglang"] is not None:
        raise EngineConfigError(
            f"engine.cpu_kernels is sglang but {problems['sglang']}; set engine.cpu_kernels to auto or torch"
        )
    problems["native"] = _native_problem(model, settings.native_kernels, problems["sglang"])
    if settings.native_kernels == "on" and problems["native"] is not None:
        raise EngineConfigError(
            f"engine.native_kernels is on but {problems['native']}; set engine.native_kernels to auto or off"
        )
    native = problems["native"] is None
    if problems["sglang"] is None:
        return SglangKernels(SglangCpuKernels(native=native), NativeBf16Loop() if native else None, problems)
    if native:
        return PortableKernels(PortableFp32Loop(), own_matmul_rows(), problems)
    packed = problems["pack"] is None if settings.pack_weights is None else settings.pack_weights
    return TorchOps(packed=packed, problems=problems)


def _sglang_problem(model: ModelShape, setting: CpuKernelsSetting) -> str | None:
    """Why the lean forward does not run on SGLang's CPU kernels (None: it does)."""
    if setting == "torch":
        return "engine.cpu_kernels is torch"
    if model.lean_reason is not None:
        return f"the lean forward is not used ({model.lean_reason})"
    return kernels_problem(model.dtype, model.device) or shapes_problem(model.shapes)


def _native_problem(model: ModelShape, setting: NativeKernelsSetting, sglang: str | None) -> str | None:
    """Why decode steps do not run agentrl's own CPU kernels (None: they do): the portable loop for fp32, the bf16
    set on SGLang's kernels otherwise."""
    if setting == "off":
        return "engine.native_kernels is off"
    if model.dtype == torch.float32:
        if model.lean_reason is not None:
            return f"the lean forward is not used ({model.lean_reason})"
        return portable_problem(model.device)
    if sglang is not None:
        return f"SGLang's CPU kernels are not used ({sglang})"
    if model.head_dim not in HEAD_DIMS:
        return f"the kernel takes head_dim {HEAD_DIMS}, the model's is {model.head_dim}"
    refused = [p for p in map(shape_problem, sorted(model.shapes)) if p is not None]
    return refused[0] if refused else native_problem()
