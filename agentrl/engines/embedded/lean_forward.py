"""A lean hand-written forward for the Llama / Qwen2 / Qwen3 family over the engine's SlotKVCache.

It reads the Hugging Face model's own parameters (no weight copy, so in-place weight updates are live
at once): q/k/v and gate/up weights are re-pointed at row slices of one buffer per layer, so each group
is one matmul. It skips HF's per-call mask building, cache classes and module hooks; its logits match
the HF forward within float rounding; ``lean_support`` says when it cannot be used.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from agentrl.engines.embedded.cpu.kernels import CpuKernels, MatmulForm, TorchOps
from agentrl.engines.embedded.cpu.packed_weights import PackedWeight, linear_packed
from agentrl.engines.embedded.cpu.sglang import DecodeTable, decode_token_table
from agentrl.engines.embedded.kv_cache import SlotKVCache, StepLayout
from agentrl.engines.embedded.layer_weights import LayerWeights, hf_rms_norm
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
    if getattr(config, "use_sliding_window", False) or any(
        t != "full_attention" for t in getattr(config, "layer_types", None) or []
    ):
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


def projection_shapes(model: torch.nn.Module) -> set[tuple[int, int]]:
    """``(out, in)`` of every matrix ``LeanForward`` multiplies by: fused q/k/v, o, fused gate/up, down, the head."""
    shapes = {tuple(model.lm_head.weight.shape)}
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for group in (
            (attn.q_proj, attn.k_proj, attn.v_proj),
            (attn.o_proj,),
            (mlp.gate_proj, mlp.up_proj),
            (mlp.down_proj,),
        ):
            shapes.add((sum(m.weight.shape[0] for m in group), group[0].weight.shape[1]))
    return shapes


# float32 steps of at most this many token rows multiply weight-left on CPU: measured 1.1-2.3x faster engine decode
# at batch 1-8 on a 2-core AVX-512 EPYC, slower from about 12 rows (docs/results/memory-and-speed.md)
_CPU_FP32_WEIGHT_LEFT_ROWS = 8


def default_weight_left_rows(dtype: torch.dtype, device: torch.device) -> int:
    """Row count up to which ``LeanForward`` multiplies weight-left by default: float32 on CPU only (bf16's
    kernels and GPUs' are faster the usual way round)."""
    return _CPU_FP32_WEIGHT_LEFT_ROWS if dtype == torch.float32 and device.type == "cpu" else 0


class LeanForward:
    """Mixed prefill/decode steps for a supported HF model over a ``SlotKVCache`` (``step``).

    Tokens run flat (``[tokens, hidden]``): at small batch every op's dispatch cost is what a step costs. With
    torch ops (the reference loop) the residual adds are fused into the output matmuls (~20 ops a layer); with SGLang's
    CPU kernels (``kernels``, bf16 on CPU) each residual add is fused into the next RMSNorm and a layer is ~12 ops.
    The CPU acceleration comes through one interface (``cpu.kernels.CpuKernels``): a weight packing, fused ops, and a
    native loop for decode-only steps (``decode_loop``) that makes the Python loop's calls in its order.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        max_seq_len: int,
        weight_left_rows: int = 0,
        kernels: CpuKernels | None = None,
    ) -> None:
        reason = lean_support(model)
        if reason is not None:
            raise EngineError(f"LeanForward cannot run this model: {reason}; run it with ModelRunner(..., lean=False)")
        self.model = model
        # steps of at most this many token rows multiply weight-left (``project_rows``)
        self.weight_left_rows = weight_left_rows
        # the CPU acceleration (cpu/kernels.py; the caller's ``select`` checked it runs here): torch ops by default
        self.cpu = kernels if kernels is not None else TorchOps()
        self.kernels = self.cpu.fused  # fused bf16 ops for the Python loop (None: torch ops)
        # steps of at most this many token rows multiply through agentrl's float32 matmul (before weight-left)
        self.own_matmul_rows = self.cpu.own_matmul_rows
        self.pack_weights = isinstance(self.cpu, TorchOps) and self.cpu.pack is not None
        attn = model.model.layers[0].self_attn
        self.head_dim = int(attn.head_dim)
        self.heads = int(model.config.num_attention_heads)
        self.kv_heads = int(model.config.num_key_value_heads)
        self.groups = self.heads // self.kv_heads
        self.scaling = float(attn.scaling)
        self.qk_norm = hasattr(attn, "q_norm")
        self.rope_cos, self.rope_sin_signed = self._rope_tables(max_seq_len)
        # SGLang's rotary kernel reads [positions, cos half | sin half] (neox style, as HF's rotate_half)
        half = self.head_dim // 2
        self.cos_sin = torch.cat((self.rope_cos[:, :half], self.rope_sin_signed[:, half:]), dim=-1)
        pack = self.cpu.pack
        self.layers = [LayerWeights(layer, self.heads, self.kv_heads, pack) for layer in model.model.layers]
        self._capture_model_tensors()
        self.head_packed = (
            PackedWeight(lambda: self.head_weight, lambda: (self.model.lm_head.weight,), pack) if pack else None
        )
        # decode-only steps run their layer loop natively where the kernel set has one that takes this model: the
        # same calls as the Python loop, bit for bit, without Python between them
        qk_epsilons = sorted({eps for lw in self.layers for eps in (lw.qk_norms or ())[2:]})
        self.qk_eps = qk_epsilons[0] if qk_epsilons else 0.0
        loop = self.cpu.decode_loop
        self.decode_loop = loop if loop is not None and loop.problem(self) is None else None
        self.native_loop = self.decode_loop is not None  # False: decode steps run the Python loop (tests, profiles)

    def matmul_form(self, rows: int) -> MatmulForm:
        """How a step of ``rows`` token rows multiplies its projections: agentrl's float32 matmul up to
        ``own_matmul_rows``, else weight-left up to ``weight_left_rows``, else ``F.linear``."""
        if rows <= self.own_matmul_rows:
            return MatmulForm.AGENTRL
        return MatmulForm.WEIGHT_LEFT if rows <= self.weight_left_rows else MatmulForm.LINEAR

    def _capture_model_tensors(self) -> None:
        inner = self.model.model
        self._embed = inner.embed_tokens.weight
        self.final_norm, self.final_eps = inner.norm.weight, float(inner.norm.variance_epsilon)
        self.head_weight, self.head_bias = self.model.lm_head.weight, self.model.lm_head.bias

    def refresh(self) -> None:
        """Follow parameters that were re-pointed (``model.to``, ``load_state_dict(assign=True)``).

        In-place weight updates (the engine's path) need nothing: every tensor here is, or views,
        the model's own parameter. ``step`` calls this when rows join, not on every decode step; packed copies
        of changed parameters are dropped here too (the engine drops them all at every weight update).
        """
        for layer in self.layers:
            layer.refresh()
        self._capture_model_tensors()
        for packed in self._packed_weights():
            packed.validate()
        if self.decode_loop is not None:
            self.decode_loop.forget()

    def drop_packed(self) -> None:
        """Free the packed weight copies (a weight update or a memory release); the next step packs again."""
        for packed in self._packed_weights():
            packed.drop()
        if self.decode_loop is not None:
            self.decode_loop.forget()

    def _packed_weights(self) -> list[PackedWeight]:
        layers = [p for layer in self.layers for p in layer.packed]
        return layers + ([self.head_packed] if self.head_packed is not None else [])

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

    def step(self, ids: torch.Tensor, layout: StepLayout, cache: SlotKVCache) -> torch.Tensor:
        """Run one mixed step over the flat token ids ``[tokens]`` laid out by ``cache.begin_step``;
        returns the logits ``[decode_rows + new_rows, vocab]`` (each decode row, then each new row's last token).

        Every matmul sees all tokens at once; only attention splits: decode rows against their cache
        window, new rows through a padded view against theirs.
        """
        if layout.new_rows:
            self.refresh()  # rows join rarely: the cheap moment to follow re-pointed parameters
        t, dim = ids.shape[0], self.head_dim
        x_td = F.embedding(ids, self._embed)
        if self.native_loop and not layout.new_rows and all(keys is not None for keys in cache.keys):
            return self.decode_loop.run(self, x_td, layout, cache)
        if self.kernels is not None:
            return self._kernel_layers(x_td, layout, cache)
        rope = (
            self.rope_cos.index_select(0, layout.positions).view(t, 1, dim),
            self.rope_sin_signed.index_select(0, layout.positions).view(t, 1, dim),
        )
        form = self.matmul_form(t)
        for i, lw in enumerate(self.layers):
            h_td = hf_rms_norm(x_td, lw.in_norm, lw.in_eps)
            qk_thd, v_thd = self._split_heads(lw, _project(h_td, lw.qkv_weight, lw.qkv_bias, lw.qkv_packed, form=form))
            qk_thd = self._rotate(qk_thd, rope)
            out_td = self._attention(i, qk_thd[:, : self.heads], qk_thd[:, self.heads :], v_thd, layout, cache, None)
            x_td = _project(out_td, lw.o_weight, lw.o_bias, lw.o_packed, x_td, form=form)
            h_td = hf_rms_norm(x_td, lw.post_norm, lw.post_eps)
            gate_up = _project(h_td, lw.gate_up_weight, lw.gate_up_bias, lw.gate_up_packed, form=form)
            gate, up = gate_up.split(lw.intermediate, dim=-1)
            x_td = _project(lw.act(gate) * up, lw.down_weight, lw.down_bias, lw.down_packed, x_td, form=form)
        last_nd = x_td if not layout.new_rows else x_td.index_select(0, layout.logit_index)
        head_in = hf_rms_norm(last_nd, self.final_norm, self.final_eps)
        form = self.matmul_form(last_nd.shape[0])
        return _project(head_in, self.head_weight, self.head_bias, self.head_packed, form=form)

    def _kernel_layers(self, x_td: torch.Tensor, layout: StepLayout, cache: SlotKVCache) -> torch.Tensor:
        """The step's layers and head on SGLang's kernels: ``x_td`` holds the residual stream, updated in place by
        each fused residual-add + RMSNorm, whose normalised output feeds the next projection."""
        kernels = self.kernels
        table = self._decode_table(layout, cache)
        layers = self.layers
        h_td = kernels.rms_norm(x_td, layers[0].in_norm, layers[0].in_eps)
        for i, lw in enumerate(layers):
            qk_thd, v_thd = self._split_heads(lw, kernels.linear(h_td, lw.qkv_packed.get(), lw.qkv_bias))
            q_thd, k_thd = kernels.rotate(layout.positions, qk_thd, self.heads, self.cos_sin)
            out_td = self._attention(i, q_thd, k_thd, v_thd, layout, cache, table)
            h_td = kernels.linear(out_td, lw.o_packed.get(), lw.o_bias)
            kernels.add_rms_norm(h_td, x_td, lw.post_norm, lw.post_eps)
            gate_up = kernels.linear(h_td, lw.gate_up_packed.get(), lw.gate_up_bias)
            h_td = kernels.linear(kernels.silu_and_mul(gate_up), lw.down_packed.get(), lw.down_bias)
            last = i + 1 == len(layers)
            norm, eps = (self.final_norm, self.final_eps) if last else (layers[i + 1].in_norm, layers[i + 1].in_eps)
            kernels.add_rms_norm(h_td, x_td, norm, eps)
        head_in = h_td if not layout.new_rows else h_td.index_select(0, layout.logit_index)
        return kernels.linear(head_in, self.head_packed.get(), self.head_bias)

    def _decode_table(self, layout: StepLayout, cache: SlotKVCache) -> DecodeTable | None:
        """The kernel decode attention's token table and lengths for this step (None without decode rows).

        The kernel attends every decode step: one row over 64 cached tokens took 7.6 µs in place on one thread
        against 15.6 µs in SDPA (which the kernel lost to, 46 µs, while it woke a second thread for it)."""
        r = layout.decode_rows
        write_col = cache.end - 1 + layout.advance
        width = write_col + 1 - layout.decode_lo
        if self.kernels is None or r == 0:
            return None
        positions = layout.positions if not layout.new_rows else layout.positions[:r]
        return decode_token_table(positions, write_col, width, self.kv_heads, cache.cols_cap)

    def _split_heads(self, lw: LayerWeights, qkv_td: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k heads ``[t, heads + kv_heads, dim]`` (per-head normed where the model does) and v
        ``[t, kv_heads, dim]``, from the fused projection."""
        t, heads, kv_heads, dim = qkv_td.shape[0], self.heads, self.kv_heads, self.head_dim
        qkv_thd = qkv_td.view(t, heads + 2 * kv_heads, dim)
        qk_thd = qkv_thd[:, : heads + kv_heads]
        return (lw.norm_qk_heads(qk_thd) if self.qk_norm else qk_thd), qkv_thd[:, heads + kv_heads :]

    def _rotate(self, qk_thd: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """q and k heads rotated as HF's ``rotate_half`` does, in one multiply-add over both."""
        cos_t1d, sin_t1d = rope
        return torch.addcmul(qk_thd * cos_t1d, qk_thd.roll(self.head_dim // 2, dims=-1), sin_t1d)

    def _attention(
        self,
        i: int,
        q_thd: torch.Tensor,
        k_thd: torch.Tensor,
        v_thd: torch.Tensor,
        layout: StepLayout,
        cache: SlotKVCache,
        table: DecodeTable | None,
    ) -> torch.Tensor:
        """Store k/v in the cache and attend: decode rows against their cache window (on the kernel when ``table``
        is given), new rows through a padded view against theirs. Returns ``[tokens, heads * dim]``."""
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        r, k = layout.decode_rows, layout.new_rows
        if table is not None and not k and cache.keys[i] is not None:  # decode only: the kernel stores k/v itself
            keys, values = cache.keys[i], cache.values[i]
            return self.kernels.decode_attention(q_thd, keys, values, table, self.scaling, (k_thd, v_thd)).view(r, -1)
        decode_kv, new_kv = cache.write_step(i, layout, k_thd, v_thd)
        out_td = decode_out = None
        if r and table is not None:
            q_rhd = q_thd if not k else q_thd[:r]
            out = self.kernels.decode_attention(q_rhd, cache.keys[i], cache.values[i], table, self.scaling)
            out_td = decode_out = out.view(r, heads * dim)
        elif r:  # fold each KV head's query group into the query axis, so no K/V repeat is needed
            q = (q_thd if not k else q_thd[:r]).reshape(r, kv_heads, self.groups, dim)
            out_td = decode_out = F.scaled_dot_product_attention(
                q, *decode_kv, attn_mask=layout.decode_mask, scale=self.scaling
            ).view(r, heads * dim)
        if k:
            padded = q_thd.new_zeros(k * layout.new_max, heads, dim).index_copy_(0, layout.pad_index, q_thd[r:])
            q = padded.view(k, layout.new_max, heads, dim).transpose(1, 2)
            out = F.scaled_dot_product_attention(
                q, *new_kv, attn_mask=layout.new_mask, scale=self.scaling, enable_gqa=self.groups > 1
            )
            out_td = out.transpose(1, 2).reshape(k * layout.new_max, heads * dim).index_select(0, layout.pad_index)
            if decode_out is not None:
                out_td = torch.cat((decode_out, out_td))
        return out_td


def _project(
    x_td: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    packed: PackedWeight | None,
    residual_td: torch.Tensor | None = None,
    *,
    form: MatmulForm,
) -> torch.Tensor:
    """``project_rows``, through the weight's packed copy when there is one (the same numbers, faster)."""
    if packed is not None and form is MatmulForm.LINEAR:
        return linear_packed(x_td, packed.get(), bias, residual_td)
    return project_rows(x_td, weight, bias, residual_td, form=form)


def project_rows(
    x_td: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    residual_td: torch.Tensor | None = None,
    *,
    form: MatmulForm,
) -> torch.Tensor:
    """``residual + x @ weight.T + bias`` over token rows ``[t, in]``, contiguous ``[t, out]``.

    ``WEIGHT_LEFT`` computes it as ``weight @ x.T`` (one column per row) and transposes back. At a few rows in
    float32, MKL's kernels for that form stream the weights at about twice the rate of ``F.linear``'s on the
    measured CPUs (``bench/gemm_layouts.py``), and a single row is sent as two identical columns,
    because the one-column product takes a slower path. The result differs from ``F.linear``'s only in float
    rounding, as it already does between batch sizes. ``AGENTRL`` is agentrl's float32 matmul
    (``cpu/csrc/linear_fp32.cpp``, loaded with the portable loop): each output summed in one fixed order, so a row's
    result does not depend on the batch it is in.
    """
    if form is MatmulForm.AGENTRL:
        return torch.ops.agentrl.linear_fp32(x_td, weight, bias, residual_td)
    if form is MatmulForm.LINEAR:
        if residual_td is None:
            return F.linear(x_td, weight, bias)
        if bias is None:
            return torch.addmm(residual_td, x_td, weight.t())
        return residual_td + F.linear(x_td, weight, bias)
    rows = x_td.shape[0]
    if rows == 1:
        x_td = torch.cat((x_td, x_td))
        residual_td = None if residual_td is None else torch.cat((residual_td, residual_td))
    if residual_td is not None:
        out_ot = torch.addmm(residual_td.t(), weight, x_td.t())
        if bias is not None:
            out_ot += bias[:, None]
    elif bias is not None:
        out_ot = torch.addmm(bias[:, None], weight, x_td.t())
    else:
        out_ot = torch.mm(weight, x_td.t())
    return out_ot[:, :rows].t().contiguous()
