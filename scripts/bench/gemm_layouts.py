"""The decode step's matmuls in both weight layouts, per dtype (``scripts/bench/bench_roofline.py`` section
``layouts``).

A decode step multiplies ``batch`` rows by each weight matrix. PyTorch stores a linear's weight ``[out, in]``
and ``F.linear`` multiplies by its transpose; ``x @ Wt`` with ``Wt`` a contiguous ``[in, out]`` copy is the same
product in the other layout. At decode's few rows the two run at very different rates on some CPUs (the lean
forward's ``[in, out]`` copies, ``agentrl/engines/embedded/kmajor.py``, rest on it), so each shape of the model
is timed both ways, in fp32 and bf16, side by side.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F


def model_matmul_shapes(arch: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """``(in, out)`` of each matrix a decode step multiplies by, from a Hugging Face ``config.json``."""
    hidden, inter = int(arch["hidden_size"]), int(arch["intermediate_size"])
    heads = int(arch["num_attention_heads"])
    kv_heads = int(arch.get("num_key_value_heads") or heads)
    head_dim = int(arch.get("head_dim") or hidden // heads)
    return {
        "qkv": (hidden, (heads + 2 * kv_heads) * head_dim),
        "o": (heads * head_dim, hidden),
        "gate_up": (hidden, 2 * inter),
        "down": (inter, hidden),
        "lm_head": (hidden, int(arch["vocab_size"])),
    }


def _seconds(fn: Any, repeats: int, inner: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - started) / inner)
    return best


def layout_rates(
    shapes: dict[str, tuple[int, int]], batches: list[int], dtypes: dict[str, torch.dtype], repeats: int
) -> dict[str, Any]:
    """GFLOP/s of ``F.linear(x, W)`` (``[out, in]``) and ``x @ Wt`` (``[in, out]``) for every shape, batch and
    dtype, with the step-weighted ratio ``in_out_over_out_in`` (FLOPs of all shapes over the time of all)."""
    out: dict[str, Any] = {}
    for name, dtype in dtypes.items():
        for batch in batches:
            per_shape, time_out_in, time_in_out, flops_all = {}, 0.0, 0.0, 0.0
            for shape, (k, n) in shapes.items():
                x = torch.randn(batch, k).to(dtype)
                weight = (torch.randn(n, k) / k**0.5).to(dtype)
                weight_t = weight.t().contiguous()
                flops = 2.0 * batch * k * n
                inner = max(1, int(5e7 // flops))
                a = _seconds(lambda: F.linear(x, weight), repeats, inner)  # noqa: B023
                b = _seconds(lambda: torch.mm(x, weight_t), repeats, inner)  # noqa: B023
                per_shape[shape] = {"out_in_gflop_s": flops / a / 1e9, "in_out_gflop_s": flops / b / 1e9}
                time_out_in, time_in_out, flops_all = time_out_in + a, time_in_out + b, flops_all + flops
            out[f"{name}_b{batch}"] = {
                "shapes": per_shape,
                "step_out_in_gflop_s": flops_all / time_out_in / 1e9,
                "step_in_out_gflop_s": flops_all / time_in_out / 1e9,
                "in_out_over_out_in": time_out_in / time_in_out,
            }
    return out
