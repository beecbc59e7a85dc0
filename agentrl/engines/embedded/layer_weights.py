"""One decoder layer's tensors for the lean forward, read once, with q/k/v and gate/up fused into one buffer each."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from agentrl.engines.embedded.cpu.packed_weights import PackedWeight


class LayerWeights:
    """One decoder layer's tensors, read once instead of through module attributes every step.

    q/k/v (and gate/up) become row slices of one buffer: the HF model's parameters become views into
    it (same values, same memory), so one matmul serves the group and in-place updates of any
    parameter land in the buffer. ``refresh`` re-fuses when a parameter was re-pointed.
    """

    def __init__(
        self,
        layer: torch.nn.Module,
        heads: int,
        kv_heads: int,
        pack: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self._layer = layer
        self._heads, self._kv_heads = heads, kv_heads
        attn, mlp = layer.self_attn, layer.mlp
        self._qkv = [attn.q_proj, attn.k_proj, attn.v_proj]
        self._gate_up = [mlp.gate_proj, mlp.up_proj]
        self.intermediate = int(mlp.gate_proj.weight.shape[0])
        # SiLU (every supported family's default) as a function: a module call costs more than the op
        self.act = (
            F.silu
            if type(mlp.act_fn).__name__ == "SiLUActivation" or isinstance(mlp.act_fn, torch.nn.SiLU)
            else mlp.act_fn
        )
        self._ptrs: tuple[int, ...] = ()
        self._qk_weight_key: tuple[int, ...] = ()
        self.refresh()
        attn_o, mlp_down = layer.self_attn.o_proj, layer.mlp.down_proj
        self.qkv_packed = self.o_packed = self.gate_up_packed = self.down_packed = None
        if pack is not None:  # each packed copy follows its parameters' versions (fused ones: all of theirs)
            self.qkv_packed = PackedWeight(lambda: self.qkv_weight, lambda: [m.weight for m in self._qkv], pack)
            self.o_packed = PackedWeight(lambda: self.o_weight, lambda: (attn_o.weight,), pack)
            self.gate_up_packed = PackedWeight(
                lambda: self.gate_up_weight, lambda: [m.weight for m in self._gate_up], pack
            )
            self.down_packed = PackedWeight(lambda: self.down_weight, lambda: (mlp_down.weight,), pack)

    @property
    def packed(self) -> list[PackedWeight]:
        """This layer's packed weight copies (none without packing)."""
        copies = (self.qkv_packed, self.o_packed, self.gate_up_packed, self.down_packed)
        return [p for p in copies if p is not None]

    def _current_ptrs(self) -> tuple[int, ...]:
        modules = (*self._qkv, *self._gate_up)
        return tuple(m.weight.data_ptr() for m in modules) + tuple(
            m.bias.data_ptr() for m in modules if m.bias is not None
        )

    def refresh(self) -> None:
        """Re-fuse if any parameter no longer points into this layer's buffers; re-read the others."""
        if self._current_ptrs() != self._ptrs:
            with torch.inference_mode(False), torch.no_grad():  # parameters must stay normal tensors
                self.qkv_weight, self.qkv_bias = _fuse_rows(self._qkv)
                self.gate_up_weight, self.gate_up_bias = _fuse_rows(self._gate_up)
            self._ptrs = self._current_ptrs()
        layer = self._layer
        attn, mlp = layer.self_attn, layer.mlp
        self.in_norm, self.in_eps = layer.input_layernorm.weight, float(layer.input_layernorm.variance_epsilon)
        self.post_norm, self.post_eps = (
            layer.post_attention_layernorm.weight,
            float(layer.post_attention_layernorm.variance_epsilon),
        )
        self.o_weight, self.o_bias = attn.o_proj.weight, attn.o_proj.bias
        self.down_weight, self.down_bias = mlp.down_proj.weight, mlp.down_proj.bias
        self._q_norm, self._k_norm = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        self._qk_weight_key = ()

    @property
    def qk_norms(self) -> tuple[torch.Tensor, torch.Tensor, float, float] | None:
        """The per-head q and k norms' weights and epsilons (Qwen3), or None."""
        if self._q_norm is None or self._k_norm is None:
            return None
        q_norm, k_norm = self._q_norm, self._k_norm
        return q_norm.weight, k_norm.weight, float(q_norm.variance_epsilon), float(k_norm.variance_epsilon)

    def norm_qk_heads(self, qk_heads: torch.Tensor) -> torch.Tensor:
        """Per-head RMSNorm of q heads ``[..., :heads, :]`` and k heads ``[..., heads:, :]``.

        Each group of heads has its own weight.
        """
        q_norm, k_norm = self._q_norm, self._k_norm
        if qk_heads.dtype != torch.float32 or q_norm.variance_epsilon != k_norm.variance_epsilon:
            heads = self._heads
            return torch.cat(
                (
                    hf_rms_norm(qk_heads[..., :heads, :], q_norm.weight, q_norm.variance_epsilon),
                    hf_rms_norm(qk_heads[..., heads:, :], k_norm.weight, k_norm.variance_epsilon),
                ),
                dim=-2,
            )
        return F.rms_norm(qk_heads, (qk_heads.shape[-1],), None, q_norm.variance_epsilon) * self._qk_weight()

    def _qk_weight(self) -> torch.Tensor:
        """q_norm's weight repeated per q head, then k_norm's per k head; rebuilt after any in-place change."""
        q_w, k_w = self._q_norm.weight, self._k_norm.weight
        key = (q_w.data_ptr(), q_w._version, k_w.data_ptr(), k_w._version)
        if key != self._qk_weight_key:
            dim = q_w.shape[0]
            self._qk_weight_hd = torch.cat(
                (q_w.detach().expand(self._heads, dim), k_w.detach().expand(self._kv_heads, dim))
            )
            self._qk_weight_key = key
        return self._qk_weight_hd


def _fuse_rows(linears: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Concatenate the linears' weights (and biases) by rows and re-point each parameter at its slice."""
    weight = torch.cat([m.weight for m in linears], dim=0)
    has_bias = [m.bias is not None for m in linears]
    bias = (
        torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.weight.shape[0]) for m in linears])
        if any(has_bias)
        else None
    )
    start = 0
    for m in linears:
        rows = m.weight.shape[0]
        m.weight.data = weight[start : start + rows]
        if m.bias is not None:
            m.bias.data = bias[start : start + rows]
        start += rows
    return weight, bias


def hf_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF's RMSNorm: fused in float32; half precisions upcast like HF (normalise in fp32, then scale)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)
