"""The portable decode path: a float32 decode step's layer loop in C++ (``csrc/portable_layers.cpp``) on any x86-64
CPU with AVX2/FMA, and on aarch64 (NEON); torch ops (the Python loop) elsewhere.

The loop makes the reference loop's calls in its order, so the logits are the Python loop's, bit for bit (the
tests compare them); what it removes is the Python between the ~20 calls a layer. On x86-64 the projections of steps
of up to ``OWN_MATMUL_ROWS`` rows run on agentrl's float32 matmul (``csrc/linear_fp32.cpp``, AVX2/FMA) in both loops:
on SmolLM2's projections it outran torch's sgemm (MKL) at every row count from 1 to 128 on the machine measured
(``bench/gemm_layouts.py``, docs/results/portable-cpu.md), and its speed does not hang on the CPU's vendor. The
rest stays torch's (SDPA, norms, the matmuls of bigger steps, and all of them on aarch64, where the kernel is not
measured), which chooses its instruction set at run time (capped by ``ATEN_CPU_CAPABILITY``, ``ONEDNN_MAX_CPU_ISA``,
``MKL_ENABLE_INSTRUCTIONS``). The library is built once per instruction-set family, its flags part of the cached
file's name (``build.py``); ``portable_problem`` says why it is not used.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch

from agentrl.engines.embedded.cpu.build import KernelLibrary, build_and_load, compiler
from agentrl.engines.embedded.cpu.isa import capability, kernel_flags, machine
from agentrl.engines.embedded.cpu.kernels import DecodeLoop, LoopModel

if TYPE_CHECKING:
    from agentrl.engines.embedded.kv_cache import SlotKVCache, StepLayout

X86_FLAGS = ("avx2", "fma")
_SOURCES = ("portable_layers.cpp", "linear_fp32.cpp")
_HEADERS = ("linear_fp32.h",)
# steps of at most this many rows multiply through agentrl's matmul on x86-64 (faster than MKL's sgemm from 1 to 128
# rows of SmolLM2's projections on the machine measured; prefill's hundreds of rows stay with MKL's blocked sgemm)
OWN_MATMUL_ROWS = 128
# per family: the compile flags (NEON is part of the aarch64 base instruction set)
_ARCH_FLAGS = {"x86_64": ("-mavx2", "-mfma"), "aarch64": ("-march=armv8-a",)}


def portable_library(family: str) -> KernelLibrary:
    """The portable loop's library for an instruction-set family (``x86_64`` or ``aarch64``)."""
    return KernelLibrary(f"agentrl_portable_{family}", _SOURCES, _HEADERS, _ARCH_FLAGS[family])


def isa_problem() -> str | None:
    """Why this CPU does not get the portable loop (None when it does), from its flags under the cap."""
    family = machine()
    if capability() == "none":
        return "AGENTRL_CPU_CAPABILITY is none"
    if family == "aarch64":
        return None
    if family != "x86_64":
        return f"the portable loop is built for x86-64 (AVX2/FMA) and aarch64, not {family}"
    missing = [f for f in X86_FLAGS if f not in kernel_flags()]
    return f"this CPU lacks {', '.join(missing)}, which the portable loop is built for" if missing else None


@functools.lru_cache(maxsize=1)
def _load(family: str) -> str | None:
    if hasattr(torch.ops.agentrl, "portable_decode_layers"):
        return None
    return build_and_load(portable_library(family), compiler())


def own_matmul_rows() -> int:
    """Up to how many rows float32 steps multiply through agentrl's matmul here (0 off x86-64: not measured)."""
    return OWN_MATMUL_ROWS if machine() == "x86_64" else 0


def portable_problem(device: torch.device) -> str | None:
    """Why float32 decode steps do not run the portable C++ loop (None: they do; built and loaded now)."""
    if device.type != "cpu":
        return f"the portable loop is for CPU tensors, the model is on {device.type}"
    return isa_problem() or _load(machine())


class PortableFp32Loop(DecodeLoop):
    """``torch.ops.agentrl.portable_decode_layers`` over the model's own float32 parameters (no copy)."""

    name = "portable-fp32"

    def __init__(self) -> None:
        self._weights: tuple[list, ...] | None = None

    def problem(self, model: LoopModel) -> str | None:
        """The loop runs the reference loop's float32 form: SiLU MLPs, no packed copies, one q/k norm epsilon."""
        layers = model.layers
        if layers[0].qkv_weight.dtype != torch.float32:
            return f"the portable loop is float32, the model is {layers[0].qkv_weight.dtype}"
        if any(lw.act is not torch.nn.functional.silu for lw in layers):
            return "an MLP activation other than SiLU"
        if model.qk_norm and any(lw.qk_norms[2] != lw.qk_norms[3] for lw in layers):
            return "q and k norms with different epsilons"
        return None

    def forget(self) -> None:
        """Drop the per-layer lists (read again on the next step)."""
        self._weights = None

    def _lists(self, model: LoopModel) -> tuple[list, ...]:
        layers = model.layers
        return (
            [lw.in_norm for lw in layers], [lw.in_eps for lw in layers],
            [lw.post_norm for lw in layers], [lw.post_eps for lw in layers],
            [lw.qkv_weight for lw in layers], [lw.qkv_bias for lw in layers],
            [lw.o_weight for lw in layers], [lw.o_bias for lw in layers],
            [lw.gate_up_weight for lw in layers], [lw.gate_up_bias for lw in layers],
            [lw.down_weight for lw in layers], [lw.down_bias for lw in layers],
            [lw.qk_norms[0] for lw in layers] if model.qk_norm else [],
            [lw.qk_norms[1] for lw in layers] if model.qk_norm else [],
            [lw.qk_norms[2] for lw in layers] if model.qk_norm else [],
        )  # fmt: skip

    def run(self, model: LoopModel, x_td: torch.Tensor, layout: StepLayout, cache: SlotKVCache) -> torch.Tensor:
        """The step's logits from one ``portable_decode_layers`` call."""
        if self._weights is None:
            self._weights = self._lists(model)
        w = self._weights
        write_col = cache.end - 1 + layout.advance
        return torch.ops.agentrl.portable_decode_layers(
            x_td, layout.positions, model.rope_cos, model.rope_sin_signed, write_col, layout.decode_lo,
            layout.decode_mask, model.scaling, model.heads, model.kv_heads, int(model.matmul_form(x_td.shape[0])), *w,
            cache.keys, cache.values, model.final_norm, model.final_eps, model.head_weight,
            model.head_bias,
        )  # fmt: skip
