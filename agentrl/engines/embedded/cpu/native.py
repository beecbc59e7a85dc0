"""agentrl's own CPU kernels for bf16 decode steps on AVX512-BF16 (``csrc/``), built with the C++ compiler once.

- ``linear`` (``csrc/linear.cpp``): a matmul over its own packed weight copy (``pack_weight``). SGLang's
  ``weight_packed_linear`` does not overlap its weight stream with its arithmetic; here each thread requests the
  next 32-column weight block while it multiplies the current one: SmolLM2-135M's projections streamed at 24 rows
  ran 1.25-1.32x faster on a 2-core AVX512-BF16 EPYC, at SGLang's rate at 1-2 rows.
- ``decode_attention`` (``csrc/decode_attention.cpp``): SGLang's ``decode_attention_cpu`` reduces every (head, token)
  dot product across a vector on its own, which at head_dim 64, not memory, set its pace. This one reduces sixteen
  tokens' dot products together, shares each value row across a KV head's query group, and requests the cache rows
  ahead: 1.2-2.7x faster at the engine's decode sizes there (most at short windows). It reads the slot cache's
  ``[rows_cap, kv_heads, cols_cap, head_dim]`` buffers directly, no token table.
- ``decode_layers`` (``csrc/decode_layers.cpp``): a decode step's layers and head, the calls the lean forward's Python
  loop makes, in the same order on the same tensors (its logits, bit for bit), from C++: at batch 1 there, Python
  between the ~360 calls had been a fifth of a step.

Numbers: docs/results/memory-and-speed.md. The sources are compiled once (``build.py``: cached per source, flags,
torch and compiler version), about 10 seconds (``scripts/setup.sh`` does it); ``native_problem`` says why they cannot
be used (then the engine keeps SGLang's matmul and attention and the Python loop).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from agentrl.engines.embedded.cpu.build import KernelLibrary, build_and_load, compiler
from agentrl.engines.embedded.cpu.isa import kernel_flags

REQUIRED_CPU_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512_bf16")
HEAD_DIMS = (64, 128)
LIBRARY = KernelLibrary(
    "agentrl_kernels",
    ("decode_attention.cpp", "linear.cpp", "decode_layers.cpp"),
    ("decode_attention.h", "linear.h"),
    ("-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512bf16", "-mfma"),
)


@functools.lru_cache(maxsize=1)
def native_problem() -> str | None:
    """Why agentrl's own bf16 CPU kernels cannot run here (None when they are built, loaded and the attention matched
    torch on a probe; the layer loop's probe is its tests': it makes SGLang's calls, bit for bit)."""
    missing = [f for f in REQUIRED_CPU_FLAGS if f not in kernel_flags()]
    if missing:
        return f"this CPU lacks {', '.join(missing)}, which agentrl's own bf16 CPU kernels need"
    if not hasattr(torch.ops.agentrl, "decode_layers"):
        problem = build_and_load(LIBRARY, compiler())
        if problem is not None:
            return problem
    return _probe()


def _probe() -> str | None:
    """The attention against float32 attention on a small ragged batch, storing new keys/values, and the matmul
    against ``F.linear`` (bf16 rounding apart)."""
    generator = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(torch.bfloat16)

    q, keys, values = rand(2, 6, 64), rand(3, 2, 40, 64), rand(3, 2, 40, 64)
    fresh_k, fresh_v = keys[:2, :, 30].clone(), values[:2, :, 30].clone()
    want = reference_attention(q, keys, values, torch.tensor([31, 17]), 30, 0.125)
    keys[:, :, 30], values[:, :, 30] = 0, 0
    got = torch.ops.agentrl.decode_attention(q, keys, values, torch.tensor([31, 17]), 30, 0.125, fresh_k, fresh_v)
    x, weight, bias = rand(13, 64), rand(64, 64), rand(64)
    checks = {
        "decode attention": (got, want),
        "decode attention storing the new keys": (keys[:2, :, 30], fresh_k),
        "matmul": (linear(x, pack_weight(weight), bias), F.linear(x.float(), weight.float(), bias.float())),
    }
    for name, (got, want) in checks.items():
        if not torch.allclose(got.float(), want.float(), atol=2e-2, rtol=2e-2):
            return f"agentrl's {name} differed from torch's on a probe (max {(got.float() - want).abs().max():.3g})"
    return None


def reference_attention(
    q_rhd: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor, write_col: int, scale: float
) -> torch.Tensor:
    """What ``decode_attention`` computes, in float32 torch: row ``r`` attends its ``lengths[r]`` columns ending at
    ``write_col`` of ``keys``/``values [rows, kv_heads, cols, dim]``; returns ``[R, heads, dim]``."""
    group = q_rhd.shape[1] // keys.shape[1]
    out = []
    for r, length in enumerate(lengths.tolist()):
        window = slice(write_col + 1 - length, write_col + 1)
        k = keys[r, :, window].float().repeat_interleave(group, 0)
        v = values[r, :, window].float().repeat_interleave(group, 0)
        out.append(F.scaled_dot_product_attention(q_rhd[r].float()[:, None], k, v, scale=scale)[:, 0])
    return torch.stack(out)


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """A bf16 ``weight [N, K]`` (N a multiple of 32, K even) in the layout ``linear`` reads (a copy)."""
    return torch.ops.agentrl.pack_weight(weight.contiguous())


def linear(x_td: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T + bias`` over ``pack_weight``'s copy, in bf16; a bias is added in float32 (a bf16 one is
    converted per call: biases are small, and an in-place update stays live)."""
    return torch.ops.agentrl.linear(x_td, packed, None if bias is None else bias.float())


def shape_problem(shape: tuple[int, int]) -> str | None:
    """Why ``linear`` cannot multiply by an ``(out, in)`` weight (None when it can)."""
    out_features, in_features = shape
    if out_features % 32 or in_features % 2:
        return f"agentrl's matmul takes out features a multiple of 32 and even in features, not {shape}"
    return None


def decode_attention(
    q_rhd: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    lengths: torch.Tensor,
    write_col: int,
    scale: float,
    new_kv: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Each decode row's query heads ``[R, heads, dim]`` over its ``lengths[r]`` cached tokens ending at column
    ``write_col`` of one layer's ``[rows_cap, kv_heads, cols_cap, dim]`` buffers; ``new_kv``: the rows' new keys and
    values ``[R, kv_heads, dim]``, stored at ``write_col`` first. Call after ``native_problem()`` is None."""
    new_k, new_v = new_kv if new_kv is not None else (None, None)
    return torch.ops.agentrl.decode_attention(q_rhd, keys, values, lengths, write_col, scale, new_k, new_v)
