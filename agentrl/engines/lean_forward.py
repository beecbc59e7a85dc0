"""A lean hand-written forward for the Llama / Qwen2 / Qwen3 family over the engine's SlotKVCache.

It reads the Hugging Face model's own modules at every call (no weight copy, so in-place weight
updates are live at once) and skips HF's per-call mask building, cache classes and module hooks.
Its logits match the HF forward within float rounding; ``lean_support`` says when it cannot be used.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from agentrl.engines.kv_cache import SlotKVCache

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
    if any(m._forward_hooks or m._forward_pre_hooks for m in model.modules()):
        return "forward hooks on the model's modules"
    return None


class LeanForward:
    """Prefill and decode for a supported HF model; writes keys/values through ``SlotKVCache.update``.

    Inputs follow the runner's conventions: ``ids``/``positions`` ``[B, L]`` (prefill left-padded,
    decode L=1) and an additive mask ``[B, 1, L, S]``; returns the last position's logits ``[B, vocab]``.
    """

    def __init__(self, model: torch.nn.Module, *, max_seq_len: int) -> None:
        reason = lean_support(model)
        if reason is not None:
            raise ValueError(f"LeanForward cannot run this model: {reason}; use the Hugging Face forward")
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
        cos_bl1d = self._cos[positions][:, :, None, :]
        sin_bl1d = self._sin_signed[positions][:, :, None, :]
        x_bld = F.embedding(ids, self.model.model.embed_tokens.weight)
        for i, layer in enumerate(self.layers):
            x_bld = x_bld + self._attention(layer, _rms(x_bld, layer.input_layernorm), cos_bl1d, sin_bl1d, mask, cache, i)
            x_bld = x_bld + _mlp(layer.mlp, _rms(x_bld, layer.post_attention_layernorm))
        last_bd = _rms(x_bld[:, -1, :], self.model.model.norm)
        head = self.model.lm_head
        return F.linear(last_bd, head.weight, head.bias)

    def _attention(self, layer: torch.nn.Module, h_bld: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor, cache: SlotKVCache, idx: int) -> torch.Tensor:
        attn = layer.self_attn
        b, n = h_bld.shape[:2]
        q_blhd = _linear(h_bld, attn.q_proj).view(b, n, self.heads, self.head_dim)
        k_blhd = _linear(h_bld, attn.k_proj).view(b, n, self.kv_heads, self.head_dim)
        v_blhd = _linear(h_bld, attn.v_proj).view(b, n, self.kv_heads, self.head_dim)
        if self.qk_norm:  # Qwen3: RMSNorm over each head's dims before rope
            q_blhd, k_blhd = _rms(q_blhd, attn.q_norm), _rms(k_blhd, attn.k_norm)
        q_blhd, k_blhd = _rope(q_blhd, cos, sin), _rope(k_blhd, cos, sin)
        k_bhsd, v_bhsd = cache.update(k_blhd.transpose(1, 2), v_blhd.transpose(1, 2), idx)
        if n == 1:
            # decode: fold each KV head's query group into the query axis, so no K/V repeat is needed
            q = q_blhd.view(b, self.kv_heads, self.groups, self.head_dim)
            out = F.scaled_dot_product_attention(q, k_bhsd, v_bhsd, attn_mask=mask, scale=self.scaling)
        else:
            q = q_blhd.transpose(1, 2)
            out = F.scaled_dot_product_attention(q, k_bhsd, v_bhsd, attn_mask=mask, scale=self.scaling, enable_gqa=self.groups > 1)
            out = out.transpose(1, 2)
        return _linear(out.reshape(b, n, self.heads * self.head_dim), attn.o_proj)


def _linear(x: torch.Tensor, module: torch.nn.Linear) -> torch.Tensor:
    return F.linear(x, module.weight, module.bias)


def _mlp(mlp: torch.nn.Module, h: torch.Tensor) -> torch.Tensor:
    """SwiGLU (or the model's own activation): down(act(gate(h)) * up(h))."""
    return _linear(mlp.act_fn(_linear(h, mlp.gate_proj)) * _linear(h, mlp.up_proj), mlp.down_proj)


def _rms(x: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
    """HF's RMSNorm: fused in float32; half precisions upcast like HF (normalise in fp32, then scale)."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * h.to(x.dtype)


def _rope(x_blhd: torch.Tensor, cos_bl1d: torch.Tensor, sin_signed_bl1d: torch.Tensor) -> torch.Tensor:
    """x*cos + rotate_half(x)*sin, with rotate_half as a roll against the sign-folded sin table."""
    return torch.addcmul(x_blhd * cos_bl1d, x_blhd.roll(x_blhd.shape[-1] // 2, dims=-1), sin_signed_bl1d)
