"""The one interface between the lean forward (the reference engine: torch ops, in Python) and its CPU acceleration.

A ``CpuKernels`` is the set of operations one engine's steps run on, chosen once at run time by ``select.select`` from
the CPU's flags (``isa.kernel_flags``), the model's dtype and the engine's settings:

- ``TorchOps``: the reference, torch ops only (bf16 projections through oneDNN's packed weight copies where that
  works: the same numbers, bit for bit);
- ``SglangKernels`` (bf16, AVX512-BF16): SGLang's fused CPU kernels in the Python loop, and with agentrl's own
  (``native.py``) a matmul, a decode attention and a C++ loop for decode-only steps;
- ``PortableKernels`` (fp32, any x86-64 with AVX2/FMA, or aarch64): torch ops, and a C++ loop for decode-only steps
  that makes the reference loop's calls in the reference loop's order (``portable.py``).

Each set holds at most four things: ``pack`` (how a projection's weight copy is made), ``fused`` (the fused ops the
bf16 Python loop calls instead of torch's), ``decode_loop`` (a ``DecodeLoop``: a decode-only step in one native
call) and ``own_matmul_rows`` (up to how many rows float32 projections run on agentrl's matmul). The lean forward
runs the reference loop wherever a set leaves a part out.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Protocol

import torch

from agentrl.engines.embedded.cpu.packed_weights import PackedWeight, pack_onednn

if TYPE_CHECKING:
    from agentrl.engines.embedded.cpu.sglang import SglangCpuKernels
    from agentrl.engines.embedded.kv_cache import SlotKVCache, StepLayout
    from agentrl.engines.embedded.layer_weights import LayerWeights


class MatmulForm(IntEnum):
    """How a step's projections multiply (``project_rows``); the value is the portable C++ loop's code for it."""

    LINEAR = 0  # F.linear / addmm: x @ weight.T
    WEIGHT_LEFT = 1  # weight @ x.T, transposed back
    AGENTRL = 2  # agentrl's float32 matmul (few rows, AVX2/FMA)


class LoopModel(Protocol):
    """What a ``DecodeLoop`` reads from the lean forward: its layers' tensors and the model's shape."""

    layers: Sequence[LayerWeights]
    heads: int
    kv_heads: int
    head_dim: int
    scaling: float
    qk_norm: bool
    qk_eps: float
    rope_cos: torch.Tensor  # [positions, head_dim]
    rope_sin_signed: torch.Tensor  # [positions, head_dim], the first half negated
    cos_sin: torch.Tensor  # [positions, cos half | sin half]
    final_norm: torch.Tensor
    final_eps: float
    head_weight: torch.Tensor
    head_bias: torch.Tensor | None
    head_packed: PackedWeight | None

    def matmul_form(self, rows: int) -> MatmulForm:
        """How a step of ``rows`` token rows multiplies its projections."""
        ...


class DecodeLoop(ABC):
    """A decode-only step's layers and head in one native call, the same operations in the same order as the Python
    loop it stands for (so the same logits: the tests compare them for every variant)."""

    name: str = ""

    @abstractmethod
    def problem(self, model: LoopModel) -> str | None:
        """Why this loop cannot run ``model`` (None when it can)."""

    @abstractmethod
    def run(self, model: LoopModel, x_td: torch.Tensor, layout: StepLayout, cache: SlotKVCache) -> torch.Tensor:
        """The logits ``[rows, vocab]`` of a decode-only step over the embedded tokens ``x_td [rows, hidden]``."""

    @abstractmethod
    def forget(self) -> None:
        """Drop what the loop keeps of the weights (after a weight update, a memory release or a re-point)."""


class CpuKernels:
    """The operations a lean forward's steps run on (``select.select`` picks one set; the subclasses name them).

    ``pack``: makes each projection's weight copy (None: projections read the parameters); ``fused``: the fused
    bf16 ops the Python loop calls (None: the reference loop's torch ops); ``decode_loop``: the native loop for
    decode-only steps (None: Python runs them). ``problems``: why each faster set was not chosen, by name.
    """

    name = "torch"

    def __init__(
        self,
        *,
        pack: Callable[[torch.Tensor], torch.Tensor] | None = None,
        fused: SglangCpuKernels | None = None,
        decode_loop: DecodeLoop | None = None,
        own_matmul_rows: int = 0,
        problems: dict[str, str | None] | None = None,
    ) -> None:
        self.pack, self.fused, self.decode_loop = pack, fused, decode_loop
        self.own_matmul_rows = own_matmul_rows
        self.problems = dict(problems or {})

    def __repr__(self) -> str:
        loop = self.decode_loop.name if self.decode_loop is not None else None
        return f"{type(self).__name__}(name={self.name!r}, packs={self.pack is not None}, decode_loop={loop!r})"


class TorchOps(CpuKernels):
    """The reference: torch ops everywhere; bf16 projections read oneDNN-packed copies where ``packed``."""

    name = "torch"

    def __init__(self, *, packed: bool = False, problems: dict[str, str | None] | None = None) -> None:
        super().__init__(pack=pack_onednn if packed else None, problems=problems)


class SglangKernels(CpuKernels):
    """bf16 on AVX512-BF16: SGLang's fused kernels, with agentrl's matmul, attention and C++ decode loop where
    ``fused.native``."""

    name = "sglang"

    def __init__(
        self, fused: SglangCpuKernels, decode_loop: DecodeLoop | None, problems: dict[str, str | None]
    ) -> None:
        super().__init__(pack=fused.pack, fused=fused, decode_loop=decode_loop, problems=problems)


class PortableKernels(CpuKernels):
    """fp32 on any CPU the portable loop builds for (AVX2/FMA x86-64, aarch64): decode-only steps in C++
    (``portable.py``), and steps of a few rows through agentrl's float32 matmul where ``own_matmul_rows``."""

    name = "portable"

    def __init__(self, decode_loop: DecodeLoop, own_matmul_rows: int, problems: dict[str, str | None]) -> None:
        super().__init__(decode_loop=decode_loop, own_matmul_rows=own_matmul_rows, problems=problems)
