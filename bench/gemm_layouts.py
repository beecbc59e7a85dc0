"""A decode step's matmuls in each form the engine could use, per dtype (``bench/bench_roofline.py``
section ``layouts``).

A decode step multiplies ``batch`` rows by every weight matrix of the model. Three forms of the same product:

- ``linear``: ``F.linear(x, W)`` with PyTorch's stored ``W [out, in]`` (the lean forward above a few rows);
- ``in_out``: ``x @ Wt`` with ``Wt`` a contiguous ``[in, out]`` copy (a layout some CPUs stream faster);
- ``weight_left``: ``W @ x.T`` on the stored weight, a single row sent as two identical columns (the lean
  forward's form at a few float32 rows on CPU, ``engine.weight_left_rows``);
- ``packed`` (bf16 on CPU with oneDNN only): ``F.linear``'s product on a copy of ``W`` in oneDNN's packed
  layout, made once (the lean forward's bf16 form with torch ops, ``engine.pack_weights``);
- ``sglang`` (bf16 where SGLang's CPU kernels load): their matmul over a VNNI-packed copy of ``W`` (the lean
  forward's bf16 form with ``engine.native_kernels: off``);
- ``agentrl`` (bf16 where agentrl's own CPU kernels build): its matmul over its packed copy of ``W`` (the lean
  forward's bf16 form by default, ``engine.native_kernels``);
- ``agentrl_fp32`` (float32 where the portable loop builds, x86-64): agentrl's float32 matmul over the stored ``W``
  (the lean forward's float32 form up to ``portable.OWN_MATMUL_ROWS`` rows).

At decode's few rows their rates differ severalfold and the ranking differs between CPUs, so each form is timed
here, side by side, as a step would run it: over every layer's own matrices, so the weights stream from memory
as in the engine rather than sitting in the cache.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F

from agentrl.engines.embedded.cpu import native as native_kernels
from agentrl.engines.embedded.cpu import portable
from agentrl.engines.embedded.cpu.kernels import MatmulForm
from agentrl.engines.embedded.cpu.packed_weights import linear_packed, packing_problem
from agentrl.engines.embedded.cpu.sglang import SglangCpuKernels, kernels_problem, shapes_problem
from agentrl.engines.embedded.lean_forward import project_rows

FORMS = ("linear", "in_out", "weight_left")


def forms_for(dtype: torch.dtype, weight_shapes: Iterable[tuple[int, int]] = ()) -> tuple[str, ...]:
    """The forms an engine of ``dtype`` can use on this CPU for weights of ``(out, in)`` shapes: ``FORMS``, ``packed``
    where packing works, ``sglang`` where SGLang's kernels run and take every shape, ``agentrl`` where agentrl's
    kernels run too and take every shape, ``agentrl_fp32`` for float32 where the portable loop uses its matmul."""
    cpu = torch.device("cpu")
    shapes = list(weight_shapes)
    packed = ("packed",) if packing_problem(dtype, cpu) is None else ()
    fits = kernels_problem(dtype, cpu) is None and shapes_problem(shapes) is None
    ours = fits and native_kernels.native_problem() is None
    ours = ours and all(native_kernels.shape_problem(shape) is None for shape in shapes)
    fp32 = dtype == torch.float32 and portable.own_matmul_rows() > 0 and portable.portable_problem(cpu) is None
    return (
        *FORMS, *packed, *(("sglang",) if fits else ()), *(("agentrl",) if ours else ()),
        *(("agentrl_fp32",) if fp32 else ()),
    )  # fmt: skip


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


def weight_left(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` computed as ``weight @ x.T``, by the lean forward's own ``project_rows``."""
    return project_rows(x, weight, None, form=MatmulForm.WEIGHT_LEFT)


def _products(form: str, x: torch.Tensor, weight: torch.Tensor) -> Any:
    if form == "linear":
        return lambda: F.linear(x, weight)
    if form == "in_out":
        weight_t = weight.t().contiguous()
        return lambda: torch.mm(x, weight_t)
    if form == "packed":
        packed = torch.ops.mkldnn._reorder_linear_weight(weight)
        return lambda: linear_packed(x, packed, None)
    if form == "agentrl_fp32":
        return lambda: project_rows(x, weight, None, form=MatmulForm.AGENTRL)
    if form in ("sglang", "agentrl"):
        kernels = SglangCpuKernels(native=form == "agentrl")
        vnni = kernels.pack(weight)
        return lambda: kernels.linear(x, vnni, None)
    return lambda: weight_left(x, weight)


def product_calls(x: torch.Tensor, weight: torch.Tensor) -> list[Any]:
    """One call per form this dtype can use, each computing ``x @ weight.T``."""
    return [_products(form, x, weight) for form in forms_for(weight.dtype, [tuple(weight.shape)])]


def _best_seconds(calls: list[Any], repeats: int) -> float:
    for call in calls:
        call()
    best = float("inf")
    for _ in range(max(repeats, 1)):
        started = time.perf_counter()
        for call in calls:
            call()
        best = min(best, time.perf_counter() - started)
    return best


def layout_rates(
    shapes: dict[str, tuple[int, int]],
    layers: int,
    batches: list[int],
    dtypes: dict[str, torch.dtype],
    repeats: int,
) -> dict[str, Any]:
    """Per dtype and batch: each form's GFLOP/s over one step's matmuls (``layers`` copies of every layer matrix,
    the head once), per shape and for the step, and ``best_form``; ``<form>_over_linear`` are time ratios."""
    out: dict[str, Any] = {}
    for name, dtype in dtypes.items():
        forms = forms_for(dtype, [(n, k) for k, n in shapes.values()])
        generator = torch.Generator().manual_seed(0)
        weights = {
            shape: [
                (torch.randn(n, k, generator=generator) / k**0.5).to(dtype)
                for _ in range(1 if shape == "lm_head" else layers)
            ]
            for shape, (k, n) in shapes.items()
        }
        for batch in batches:
            per_shape: dict[str, dict[str, float]] = {}
            step_s = dict.fromkeys(forms, 0.0)
            flops_all = 0.0
            for shape, (k, n) in shapes.items():
                x = torch.randn(batch, k, generator=generator).to(dtype)
                flops = 2.0 * batch * k * n * len(weights[shape])
                per_shape[shape] = {}
                for form in forms:
                    seconds = _best_seconds([_products(form, x, w) for w in weights[shape]], repeats)
                    per_shape[shape][f"{form}_gflop_s"] = flops / seconds / 1e9
                    step_s[form] += seconds
                flops_all += flops
            out[f"{name}_b{batch}"] = {
                "shapes": per_shape,
                **{f"step_{form}_gflop_s": flops_all / step_s[form] / 1e9 for form in forms},
                **{f"{form}_over_linear": step_s["linear"] / step_s[form] for form in forms[1:]},
                "best_form": min(forms, key=step_s.__getitem__),
            }
    return out
