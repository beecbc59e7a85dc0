"""A lean hand-written forward for the Llama / Qwen2 / Qwen3 family over the engine's SlotKVCache.

It reads the Hugging Face model's own parameters (no weight copy, so in-place weight updates are live
at once): q/k/v and gate/up weights are re-pointed at row slices of one buffer per layer, so each group
is one matmul. It skips HF's per-call mask building, cache classes and module hooks; its logits match
the HF forward within float rounding; ``lean_support`` says when it cannot be used.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from agentrl.engines.kv_cache import SlotKVCache
from agentrl.errors import EngineError

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")
_DECODER_LAYERS = ("LlamaDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer")
# rope types whose cos/sin depend on the position only (dynamic types rescale with sequence length)
_STATIC_ROPE = ("default", "linear", "llama3")
_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP_LINEARS = ("gate_proj", "up_proj", "down_proj")


def lean_support(model: torch.nn.Module) -> str | None:
    """None when ``LeanForward`` can run ``model`` exactly; else why not (the runner uses HF's forward)."""
    name = type(model).__name__
    if name not in SUPPORTED_ARCHITECTURES:
        return f"architecture {name} is not one of {SUPPORTED_ARCHITECTURES}"
    config = model.config
    if getattr(config, "use_sliding_window", False) or any(t != "full_attention" for t in getattr(config, "layer_types", None) or []):
        return "sliding-window attention layers"
    if getattr(model.model, "rotary_emb", None) is None:
        return "no model-level rotary embedding module (an older transformers layout)"
    rope_type = getattr(model.model.rotary_emb, "rope_type", "default")
    if rope_type not in _STATIC_ROPE:
        return f"rope type {rope_type!r} (only {_STATIC_ROPE} have position-only cos/sin tables)"
    if type(model.lm_head) is not torch.nn.Linear or type(model.model.embed_tokens) is not torch.nn.Embedding:
        return "a wrapped lm_head or embedding (e.g. an adapter)"
    for layer in model.model.layers:
        if type(layer).__name__ not in _DECODER_LAYERS:
            return f"decoder layer type {type(layer).__name__}"
        linears = [getattr(layer.self_attn, n) for n in _LINEARS] + [getattr(layer.mlp, n) for n in _MLP_LINEARS]
        if any(type(m) is not torch.nn.Linear for m in linears):
            return "a projection that is not a plain nn.Linear (e.g. LoRA or quantised)"
    if any(m._forward_hooks or m._forward_pre_hooks or hasattr(m, "_hf_hook") for m in model.modules()):
        return "forward hooks on the model's modules (or accelerate device-map hooks)"
    return None


class LeanForward:
    """Prefill and decode for a supported HF model; writes keys/values through ``SlotKVCache.update``.

    Inputs follow the runner's conventions: ``ids``/``positions`` ``[B, L]`` (prefill left-padded,
    decode L=1) and an additive mask ``[B, 1, L, S]``; returns the last position's logits ``[B, vocab]``.
    """

    def __init__(self, model: torch.nn.Module, *, max_seq_len: int) -> None:
        reason = lean_support(model)
        if reason is not None:
            raise EngineError(f"LeanForward cannot run this model: {reason}; run it with ModelRunner(..., lean=False)")
        self.model = model
        self.layers = list(model.model.layers)
        attn = self.layers[0].self_attn
        self.head_dim = int(attn.head_dim)
        self.heads = int(model.config.num_attention_heads)
        self.kv_heads = int(model.config.num_key_value_heads)
        self.groups = self.heads // self.kv_heads
        self.scaling = float(attn.scaling)
        self.qk_norm = hasattr(attn, "q_norm")
        self._cos, self._sin_signed = self._rope_tables(max_seq_len)
        self._fused = [_FusedLayer(layer) for layer in self.layers]

    @torch.no_grad()
    def _rope_tables(self, max_seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin ``[positions, head_dim]`` from the model's own rotary module (same numbers per position).

        sin's first half is negated so that ``rotate_half(x) * sin == roll(x, D/2) * sin_signed``.
        """
        weight = self.model.model.embed_tokens.weight
        positions = torch.arange(max_seq_len, device=weight.device)[None]
        cos, sin = self.model.model.rotary_emb(weight[:1], positions)
        half = self.head_dim // 2
        sin_signed = torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1)
        return cos[0].contiguous(), sin_signed.contiguous()

    def __call__(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: SlotKVCache) -> torch.Tensor:
        """Run every decoder layer over ``ids`` and return the last position's logits ``[B, vocab]``."""
        b, n = positions.shape
        flat = positions.reshape(-1)  # index_select: cheaper than advanced indexing for a row gather
        cos_bl1d = self._cos.index_select(0, flat).view(b, n, 1, self.head_dim)
        sin_bl1d = self._sin_signed.index_select(0, flat).view(b, n, 1, self.head_dim)
        x_bld = F.embedding(ids, self.model.model.embed_tokens.weight)
        for i, (layer, fused) in enumerate(zip(self.layers, self._fused)):
            fused.refresh()
            x_bld = x_bld + self._attention(layer, fused, _rms(x_bld, layer.input_layernorm), (cos_bl1d, sin_bl1d), mask, cache, i)
            x_bld = x_bld + fused.mlp(_rms(x_bld, layer.post_attention_layernorm))
        last_bd = _rms(x_bld[:, -1, :], self.model.model.norm)
        head = self.model.lm_head
        return F.linear(last_bd, head.weight, head.bias)

    def _attention(self, layer: torch.nn.Module, fused: _FusedLayer, h_bld: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor, cache: SlotKVCache, idx: int) -> torch.Tensor:
        attn = layer.self_attn
        b, n = h_bld.shape[:2]
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        qkv_blhd = F.linear(h_bld, fused.qkv_weight, fused.qkv_bias).view(b, n, heads + 2 * kv_heads, dim)
        qk_blhd = qkv_blhd[:, :, : heads + kv_heads]
        if self.qk_norm:  # Qwen3: RMSNorm over each head's dims before rope (q and k heads in one call)
            qk_blhd = _rms_heads(qk_blhd, attn.q_norm, attn.k_norm, heads)
        qk_blhd = _rope(qk_blhd, *rope)
        k_bhld = qk_blhd[:, :, heads:].transpose(1, 2)
        k_bhsd, v_bhsd = cache.update(k_bhld, qkv_blhd[:, :, heads + kv_heads :].transpose(1, 2), idx)
        if n == 1:
            # decode: fold each KV head's query group into the query axis, so no K/V repeat is needed
            q = qk_blhd[:, :, :heads].view(b, kv_heads, self.groups, dim)
            out = F.scaled_dot_product_attention(q, k_bhsd, v_bhsd, attn_mask=mask, scale=self.scaling)
        else:
            q = qk_blhd[:, :, :heads].transpose(1, 2)
            out = F.scaled_dot_product_attention(q, k_bhsd, v_bhsd, attn_mask=mask, scale=self.scaling, enable_gqa=self.groups > 1)
            out = out.transpose(1, 2)
        return _linear(out.reshape(b, n, heads * dim), attn.o_proj)


class _FusedLayer:
    """One layer's q/k/v (and gate/up) weights as row slices of one buffer: the HF model's parameters
    become views into it (same values, same memory), so one matmul serves the group and in-place
    updates of any parameter land in the buffer. If a parameter is re-pointed (``model.to``,
    ``load_state_dict(assign=True)``) the group is fused again from the new values."""

    def __init__(self, layer: torch.nn.Module) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self._qkv = [attn.q_proj, attn.k_proj, attn.v_proj]
        self._gate_up = [mlp.gate_proj, mlp.up_proj]
        self._down, self._act = mlp.down_proj, mlp.act_fn
        self._intermediate = int(mlp.gate_proj.weight.shape[0])
        self._ptrs: tuple[int, ...] = ()
        self.refresh()

    def _current_ptrs(self) -> tuple[int, ...]:
        modules = (*self._qkv, *self._gate_up)
        return tuple(m.weight.data_ptr() for m in modules) + tuple(m.bias.data_ptr() for m in modules if m.bias is not None)

    def refresh(self) -> None:
        """Re-fuse if any parameter no longer points into this layer's buffers."""
        if self._current_ptrs() == self._ptrs:
            return
        with torch.inference_mode(False), torch.no_grad():  # parameters must stay normal tensors
            self.qkv_weight, self.qkv_bias = _fuse_rows(self._qkv)
            self.gate_up_weight, self.gate_up_bias = _fuse_rows(self._gate_up)
        self._ptrs = self._current_ptrs()

    def mlp(self, h_bld: torch.Tensor) -> torch.Tensor:
        """down(act(gate(h)) * up(h)) with gate and up from one matmul."""
        gate, up = F.linear(h_bld, self.gate_up_weight, self.gate_up_bias).split(self._intermediate, dim=-1)
        return _linear(self._act(gate) * up, self._down)


def _fuse_rows(linears: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Concatenate the linears' weights (and biases) by rows and re-point each parameter at its slice."""
    weight = torch.cat([m.weight for m in linears], dim=0)
    has_bias = [m.bias is not None for m in linears]
    bias = torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.weight.shape[0]) for m in linears]) if any(has_bias) else None
    start = 0
    for m in linears:
        rows = m.weight.shape[0]
        m.weight.data = weight[start : start + rows]
        if m.bias is not None:
            m.bias.data = bias[start : start + rows]
        start += rows
    return weight, bias


def _linear(x: torch.Tensor, module: torch.nn.Linear) -> torch.Tensor:
    return F.linear(x, module.weight, module.bias)


def _rms(x: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
    """HF's RMSNorm: fused in float32; half precisions upcast like HF (normalise in fp32, then scale)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(x.dtype)


def _rms_heads(qk_blhd: torch.Tensor, q_norm: torch.nn.Module, k_norm: torch.nn.Module, heads: int) -> torch.Tensor:
    """Per-head RMSNorm of q heads ``[:heads]`` and k heads ``[heads:]`` (each with its own weight)."""
    if qk_blhd.dtype != torch.float32 or q_norm.variance_epsilon != k_norm.variance_epsilon:
        return torch.cat((_rms(qk_blhd[:, :, :heads], q_norm), _rms(qk_blhd[:, :, heads:], k_norm)), dim=2)
    kv_heads, dim = qk_blhd.shape[2] - heads, qk_blhd.shape[3]
    weight_hd = torch.cat((q_norm.weight.expand(heads, dim), k_norm.weight.expand(kv_heads, dim)))
    return F.rms_norm(qk_blhd, (dim,), None, q_norm.variance_epsilon) * weight_hd


def _rope(x_blhd: torch.Tensor, cos_bl1d: torch.Tensor, sin_signed_bl1d: torch.Tensor) -> torch.Tensor:
    """x*cos + rotate_half(x)*sin, with rotate_half as a roll against the sign-folded sin table."""
    return torch.addcmul(x_blhd * cos_bl1d, x_blhd.roll(x_blhd.shape[-1] // 2, dims=-1), sin_signed_bl1d)
