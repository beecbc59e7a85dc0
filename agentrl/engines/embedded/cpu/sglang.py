"""SGLang's own CPU kernels (the ``sgl_kernel`` package's CPU build) for the embedded engine's bf16 steps.

SGLang's CPU backend runs Llama-family models on fused kernels written for AVX-512 with bf16: a matmul over a
VNNI-packed weight, RMSNorm and residual-add + RMSNorm in one pass, SiLU-and-mul, and a decode attention that
reads each row's keys and values through a token table. On a quiet 2-core AVX512-BF16 EPYC (SmolLM2-135M's
shapes, bf16) one RMSNorm row took 1.9 µs against 12.4 µs as torch ops, a residual add + norm 1.4 µs against 13.5,
and decode attention over 24 rows x 96 cached tokens 40 µs against 138 µs in PyTorch's SDPA
(docs/results/memory-and-speed.md). The lean forward uses them when they load here (``kernels_problem``).

The package is not on PyPI for CPU: ``scripts/setup.sh`` installs the wheel from the folder
``AGENTRL_SGLANG_CPU`` names where it fits (docs/engines.md#sglangs-cpu-kernel-wheel). Only its compiled op
library is loaded (``torch.ops.sgl_kernel``);
the package's Python ``__init__`` imports GPU-side modules this process does not need.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F

from agentrl.engines.embedded.cpu import native as native_kernels
from agentrl.engines.embedded.cpu.isa import kernel_flags
from agentrl.engines.embedded.cpu.omp_team import OmpTeam
from agentrl.engines.embedded.layer_weights import hf_rms_norm

# the kernels use these instructions unconditionally: loading the library elsewhere dies with SIGILL
REQUIRED_CPU_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512_bf16")

# norms, SiLU-and-mul and rotary over at most this many input elements run on the calling thread alone (omp_team.py): on
# the 2-core EPYC, one thread was faster from 2 rows up to about 300 rows of 576 for the norms and 80 rows of 3072
# for SiLU (24 rows: 3.4 against 14.6 µs, 8.8 against 17.1)
ALONE_MAX_ELEMENTS = 1 << 17
# decode attention over at most this many rows and multiply-adds per score pass (rows x window x heads x head_dim)
# runs alone: in decode steps, where the keys and values come from memory, not cache, one thread was faster up to
# about 1300 attended tokens at 9 heads x 64 (1 row x 1230, 2 x 630, 4 x 230, 8 x 64; 16 x 64 even), and never at
# 24 rows (7 µs a layer slower over 40 tokens, 25 over 64), where the team splits the rows well
ALONE_MAX_ATTENTION_ROWS = 12
ALONE_MAX_ATTENTION_MACS = 800_000


def _library_path() -> Path | None:
    """The ``sgl_kernel`` package's compiled op library, found without running the package's ``__init__``."""
    spec = importlib.util.find_spec("sgl_kernel")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("common_ops*.so"))
        if found:
            return found[0]
    return None


@functools.lru_cache(maxsize=1)
def _load() -> str | None:
    """Load the op library once per process; None when loaded, else why not."""
    missing = [f for f in REQUIRED_CPU_FLAGS if f not in kernel_flags()]
    if missing:
        return f"this CPU lacks {', '.join(missing)}, which SGLang's CPU kernels need"
    if hasattr(torch.ops.sgl_kernel, "decode_attention_cpu"):
        return None  # loaded already (e.g. by the sgl_kernel package itself)
    path = _library_path()
    if path is None:
        return (
            "SGLang's CPU kernel package (sgl_kernel, the sglang-kernel-cpu wheel) is not installed in this "
            "environment; scripts/setup.sh installs it from the folder AGENTRL_SGLANG_CPU names "
            "(docs/engines.md#sglangs-cpu-kernel-wheel)"
        )
    try:
        torch.ops.load_library(str(path))
    except (OSError, RuntimeError) as exc:  # e.g. built against another torch: undefined symbols
        return f"SGLang's CPU kernel library {path} does not load with torch {torch.__version__}: {exc}"
    return None


def kernels_problem(dtype: torch.dtype, device: torch.device) -> str | None:
    """Why the lean forward cannot run on SGLang's CPU kernels here (None when it can: a probe matched torch)."""
    if device.type != "cpu":
        return f"SGLang's CPU kernels are for CPU tensors, the model is on {device.type}"
    if dtype != torch.bfloat16:
        return f"SGLang's CPU kernels are used for bfloat16 models, the model is {dtype}"
    problem = _load()
    return problem if problem is not None else _probe()


@functools.lru_cache(maxsize=1)
def _probe() -> str | None:
    """Each kernel against its torch form on small random inputs (bf16 rounding apart)."""
    generator = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(torch.bfloat16)

    kernels = SglangCpuKernels()
    x, weight, bias, norm, gate_up = rand(3, 64), rand(48, 64), rand(48), 1 + 0.1 * rand(64), rand(3, 32)
    checks = {
        "weight_packed_linear": (kernels.linear(x, kernels.pack(weight), bias), F.linear(x, weight, bias)),
        "rmsnorm_cpu": (kernels.rms_norm(x, norm, 1e-6), hf_rms_norm(x, norm, 1e-6)),
        "silu_and_mul_cpu": (kernels.silu_and_mul(gate_up), F.silu(gate_up[:, :16]) * gate_up[:, 16:]),
    }
    keys, values, q = rand(2, 1, 8, 16), rand(2, 1, 8, 16), rand(2, 2, 16)
    positions = torch.tensor([5, 3])  # row 0 holds columns 1-6, row 1 columns 3-6
    table = decode_token_table(positions, 6, 6, 1, 8)
    want = [
        F.scaled_dot_product_attention(q[r, :, None], keys[r, :, 6 - p : 7], values[r, :, 6 - p : 7], scale=0.25)
        for r, p in enumerate(positions.tolist())
    ]
    got = kernels.decode_attention(q, keys, values, table, 0.25)
    checks["decode_attention_cpu"] = (got, torch.stack(want)[:, :, 0])
    stored_k, stored_v = keys.clone(), values.clone()  # the new tokens' keys/values handed over, not yet in place
    stored_k[:, :, 6], stored_v[:, :, 6] = 0, 0
    new_kv = (keys[:, :, 6].contiguous(), values[:, :, 6].contiguous())
    stored = kernels.decode_attention(q, stored_k, stored_v, table, 0.25, new_kv)
    checks["decode_attention_cpu storing the new tokens"] = (
        torch.cat((stored.flatten(), stored_k.flatten(), stored_v.flatten())),
        torch.cat((got.flatten(), keys.flatten(), values.flatten())),
    )
    for name, (got, want) in checks.items():
        if not torch.allclose(got.float(), want.float(), rtol=2e-2, atol=2e-2):
            return f"SGLang's {name} differed from its torch form on a probe (max {(got - want).abs().max():.3g})"
    return None


def shapes_problem(shapes: Iterable[tuple[int, int]]) -> str | None:
    """None when the packed matmul takes every ``(out, in)`` weight shape (found by packing a zero weight of each:
    the kernel's own check; e.g. out features a multiple of 16, in features of 32), else the first it refuses."""
    for shape in sorted(set(shapes)):
        problem = _shape_problem(shape)
        if problem is not None:
            return problem
    return None


@functools.lru_cache(maxsize=64)
def _shape_problem(shape: tuple[int, int]) -> str | None:
    try:
        torch.ops.sgl_kernel.convert_weight_packed(torch.zeros(shape, dtype=torch.bfloat16))
    except RuntimeError as exc:
        return f"SGLang's packed matmul refuses a {shape[0]} x {shape[1]} projection ({exc})"
    return None


class SglangCpuKernels:
    """The lean forward's bf16 CPU operations on SGLang's kernels (construct after ``kernels_problem`` is None).

    Every method is one kernel call; ``decode_attention`` attends the decode rows over the slot cache's own
    buffers, viewed as the token pool the kernel expects (no copy). Calls too small to repay waking the OpenMP
    team (``ALONE_MAX_ELEMENTS``, ``ALONE_MAX_ATTENTION_ROWS``, ``ALONE_MAX_ATTENTION_MACS``) run on the calling
    thread alone where the team sleeps between regions (``team``: ``OmpTeam``); the matmuls always take the whole
    team (one row's weights stream at 35 µs a call on two threads, 42 on one). With ``native`` (after
    ``native.native_problem`` is None), ``pack``, ``linear`` and ``decode_attention`` run agentrl's own kernels
    instead; the norms, SiLU and rotary stay SGLang's.
    """

    def __init__(self, native: bool = False) -> None:
        self._ops = torch.ops.sgl_kernel
        # matmuls and decode attention on agentrl's kernels (native.py; the caller checked they run)
        self.native = native
        self._attn_logits = torch.empty(0, dtype=torch.float32)
        self.team = OmpTeam()

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        """``weight [out, in]`` in the layout ``linear`` reads (a copy): agentrl's where ``native``, else SGLang's."""
        if self.native:
            return native_kernels.pack_weight(weight)
        return self._ops.convert_weight_packed(weight.contiguous())

    def linear(self, x_td: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """``x @ weight.T + bias`` over a packed weight (``F.linear``'s numbers at the sizes probed); the kernel adds a
        float32 bias (a bf16 one is converted per call: biases are small, and an in-place update stays live)."""
        if self.native:
            return native_kernels.linear(x_td, packed, bias)
        return self._ops.weight_packed_linear(x_td, packed, None if bias is None else bias.float(), True)

    def rotate(
        self, positions: torch.Tensor, qk_thd: torch.Tensor, heads: int, cos_sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The query heads ``qk_thd[:, :heads]`` and key heads ``qk_thd[:, heads:]`` rotated (HF's ``rotate_half``
        form) at ``positions``, as new tensors; ``cos_sin``: ``[positions, cos half | sin half]``. One call where
        torch's form took three: decode steps 1.01-1.04x faster under the short spin; under PASSIVE it runs alone
        up to ``ALONE_MAX_ELEMENTS`` (on the team it woke it: 0.99x at 8 rows)."""
        args = (positions, qk_thd[:, :heads], qk_thd[:, heads:], qk_thd.shape[-1], cos_sin, True)
        if qk_thd.numel() <= ALONE_MAX_ELEMENTS:
            return self.team.alone(self._ops.rotary_embedding_cpu, *args)
        return self._ops.rotary_embedding_cpu(*args)

    def rms_norm(self, x_td: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """RMSNorm of each row, normalised in float32."""
        if _alone_rows(x_td):
            return self.team.alone(self._ops.rmsnorm_cpu, x_td, weight, eps)
        return self._ops.rmsnorm_cpu(x_td, weight, eps)

    def add_rms_norm(self, delta_td: torch.Tensor, residual_td: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
        """In place: ``residual += delta`` (rounded to bf16), then ``delta = rms_norm(residual) * weight``."""
        if _alone_rows(delta_td):
            self.team.alone(self._ops.fused_add_rmsnorm_cpu, delta_td, residual_td, weight, eps)
        else:
            self._ops.fused_add_rmsnorm_cpu(delta_td, residual_td, weight, eps)

    def silu_and_mul(self, gate_up_td: torch.Tensor) -> torch.Tensor:
        """``silu(gate) * up`` for ``gate_up = [gate | up]``, in float32, rounded once."""
        if _alone_rows(gate_up_td):
            return self.team.alone(self._ops.silu_and_mul_cpu, gate_up_td)
        return self._ops.silu_and_mul_cpu(gate_up_td)

    def decode_attention(
        self,
        q_rhd: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        table: DecodeTable,
        scale: float,
        new_kv: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Each decode row's query heads ``[R, heads, dim]`` over its cached tokens; ``keys``/``values`` are one
        layer's ``[rows_cap, kv_heads, cols_cap, dim]`` buffers. ``new_kv``: the rows' new keys and values
        ``[R, kv_heads, dim]``, which the kernel stores at ``table.new_token`` before attending (else they are in the
        cache already). On agentrl's kernel where ``native`` (no token table read), else SGLang's with one KV
        split (measured fastest at every size tried on 2 cores)."""
        rows, heads, dim = q_rhd.shape
        alone = (
            rows <= ALONE_MAX_ATTENTION_ROWS and rows * table.tokens.shape[1] * heads * dim <= ALONE_MAX_ATTENTION_MACS
        )
        if self.native:
            args = (q_rhd, keys, values, table.seq_lens, table.write_col, scale, new_kv)
            if alone:
                return self.team.alone(native_kernels.decode_attention, *args)
            return native_kernels.decode_attention(*args)
        if self._attn_logits.shape[0] < rows or self._attn_logits.shape[1] != heads:
            self._attn_logits = torch.empty(rows, heads, 1, dim + 1, dtype=torch.float32)
        out = q_rhd.new_empty(rows, heads, dim)
        new_k, new_v = new_kv if new_kv is not None else (None, None)
        args = (
            q_rhd, token_pool(keys), token_pool(values), out, new_k, new_v, table.new_token,
            self._attn_logits[:rows], table.tokens, table.rows, table.seq_lens, scale, 0.0, False, -1, None, None,
        )  # fmt: skip
        if alone:
            self.team.alone(self._ops.decode_attention_cpu, *args)
        else:
            self._ops.decode_attention_cpu(*args)
        return out


def _alone_rows(x_td: torch.Tensor) -> bool:
    """Whether a row-wise kernel over ``x_td`` should run alone: 2 to ``ALONE_MAX_ELEMENTS`` worth of rows (a single
    row runs on one thread anyway; wrapping it cost 0.6 µs a call)."""
    return 1 < x_td.shape[0] and x_td.numel() <= ALONE_MAX_ELEMENTS


class DecodeTable(NamedTuple):
    """Where each decode row's tokens sit in the token pool (``token_pool``), the kernel's request metadata."""

    tokens: torch.Tensor  # [R, width] int32: pool token of each row's j-th token (``req_to_token``)
    seq_lens: torch.Tensor  # [R]: tokens per row, the new one included
    rows: torch.Tensor  # [R]: row r's line in ``tokens`` (``req_pool_indices``)
    new_token: torch.Tensor  # [R]: pool token of each row's new token (``out_cache_loc``)
    write_col: int  # the cache column of every row's new token (agentrl's kernel reads the slot cache directly)


def token_pool(buffer: torch.Tensor) -> torch.Tensor:
    """A ``[rows_cap, kv_heads, cols_cap, dim]`` cache buffer as the kernel's token pool ``[tokens, kv_heads, dim]``.

    Token ``t = row * kv_heads * cols_cap + col`` sits at ``t * dim`` and its head ``h`` ``h * cols_cap * dim``
    further on: one strided view of the same memory (the pool is shorter than rows_cap * kv_heads * cols_cap so
    that the last row's last head stays inside the buffer).
    """
    rows_cap, kv_heads, cols_cap, dim = buffer.shape
    tokens = (rows_cap - 1) * kv_heads * cols_cap + cols_cap
    return buffer.as_strided((tokens, kv_heads, dim), (dim, cols_cap * dim, 1))


def decode_token_table(
    positions_r: torch.Tensor, write_col: int, width: int, kv_heads: int, cols_cap: int
) -> DecodeTable:
    """The kernel's request metadata for decode rows whose new token goes to column ``write_col``.

    Row ``r`` holds ``positions[r] + 1`` tokens (its cached ones and the new one) ending at ``write_col``, so its
    token ``j`` is pool token ``r * kv_heads * cols_cap + write_col - positions[r] + j``; ``width`` is the decode
    window's column count (the longest row's tokens).
    """
    rows = torch.arange(positions_r.shape[0])
    first = rows * (kv_heads * cols_cap) + (write_col - positions_r)
    tokens = (first[:, None] + torch.arange(width)[None, :]).to(torch.int32)
    return DecodeTable(tokens, positions_r + 1, rows, first + positions_r, write_col)
