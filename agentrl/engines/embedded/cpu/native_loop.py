"""The bf16 decode loop on SGLang's and agentrl's kernels in C++ (``csrc/decode_layers.cpp``): the calls the lean
forward's fused Python loop makes, in the same order on the same tensors, so its logits bit for bit."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from agentrl.engines.embedded.cpu.kernels import DecodeLoop, LoopModel

if TYPE_CHECKING:
    from agentrl.engines.embedded.kv_cache import SlotKVCache, StepLayout


class NativeBf16Loop(DecodeLoop):
    """``torch.ops.agentrl.decode_layers`` over the layers' packed copies (``native.native_problem`` is None)."""

    name = "native-bf16"

    def __init__(self) -> None:
        self._weights: tuple[list[torch.Tensor | None], ...] | None = None

    def problem(self, model: LoopModel) -> str | None:
        """The C++ loop takes one epsilon for the layer norms and one for q/k's."""
        epsilons = {model.final_eps, *(eps for lw in model.layers for eps in (lw.in_eps, lw.post_eps))}
        qk_epsilons = {eps for lw in model.layers for eps in (lw.qk_norms or ())[2:]}
        if len(epsilons) != 1 or len(qk_epsilons) > 1:
            return "the layers' norms differ in epsilon (the C++ loop takes one)"
        return None

    def forget(self) -> None:
        """Drop the per-layer lists (their packed copies are rebuilt on the next step)."""
        self._weights = None

    def run(self, model: LoopModel, x_td: torch.Tensor, layout: StepLayout, cache: SlotKVCache) -> torch.Tensor:
        """The step's logits from one ``decode_layers`` call."""
        if self._weights is None:
            layers = model.layers
            self._weights = (
                [lw.in_norm for lw in layers], [lw.post_norm for lw in layers],
                [lw.qkv_packed.get() for lw in layers], [lw.qkv_bias for lw in layers],
                [lw.o_packed.get() for lw in layers], [lw.o_bias for lw in layers],
                [lw.gate_up_packed.get() for lw in layers], [lw.gate_up_bias for lw in layers],
                [lw.down_packed.get() for lw in layers], [lw.down_bias for lw in layers],
                [lw.qk_norms[0] for lw in layers] if model.qk_norm else [],
                [lw.qk_norms[1] for lw in layers] if model.qk_norm else [],
            )  # fmt: skip
        write_col = cache.end - 1 + layout.advance
        return torch.ops.agentrl.decode_layers(
            x_td, layout.positions, layout.positions + 1, write_col, model.scaling, model.cos_sin, model.heads,
            model.kv_heads, model.final_eps, *self._weights, model.qk_eps, cache.keys, cache.values,
            model.final_norm, model.head_packed.get(), model.head_bias,
        )  # fmt: skip
