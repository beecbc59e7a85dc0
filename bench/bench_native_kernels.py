#!/usr/bin/env python
"""agentrl's own CPU kernels (``agentrl/engines/embedded/cpu/native.py``) against SGLang's, side by side, as JSON.

Each level alternates its forms in one process, so a wandering machine compares them fairly:

- ``matmul``: SmolLM2-135M's 120 layer projections (q/k/v, o, gate/up, down) at M rows, streamed from memory as in a
  decode step, on agentrl's matmul and SGLang's ``weight_packed_linear``: ms for all, GFLOP/s and weight GB/s;
- ``kernel``: one layer's decode attention call at R rows x W cached tokens (SmolLM2's 9 query / 3 KV heads x 64),
  cycling through 30 layers' buffers so the keys and values come from memory as in a decode step; µs a call, the
  keys and values read per second, and that as a fraction of this machine's read bandwidth (a bf16 tensor's sum on
  the same threads, measured in the same run), with each kernel's largest gap to float32 attention;
- ``engine``: bare decode steps (``ModelRunner.decode`` and sampling) after prompts of each length, in three forms:
  ``off`` (``engine.native_kernels: off``: SGLang's matmul and attention, the Python layer loop), ``python_loop``
  (agentrl's matmul and attention, the Python loop) and ``on`` (the default: agentrl's kernels and the C++ loop);
  ``off_over_on`` and ``off_over_python_loop`` are the median step of ``off`` over the other's.

Usage: .venv/bin/python bench/bench_native_kernels.py --model models/smollm2-135m-instruct [--out native.json];
``--quick``: small sizes and a tiny random Llama (the tests' mode).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from agentrl.util.openmp_env import short_spin_unless_chosen, wait_policy

os.environ.update(short_spin_unless_chosen(os.environ))  # the agentrl command's OpenMP wait policy, before torch

import torch
from bench_small_ops import emit_json, load_model, step_ms

from agentrl.engines.embedded.cpu.native import native_problem, reference_attention
from agentrl.engines.embedded.cpu.sglang import SglangCpuKernels, decode_token_table, kernels_problem
from agentrl.engines.embedded.runner import ModelRunner

HEADS, KV_HEADS, HEAD_DIM, LAYERS = 9, 3, 64, 30


def best_us(call: Callable[[], object], calls: int) -> float:
    """Mean µs of ``calls`` calls, best of three runs."""
    call()
    runs = []
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        runs.append((time.perf_counter() - started) / calls * 1e6)
    return min(runs)


def read_gb_s(megabytes: int) -> float:
    """This machine's read bandwidth on torch's threads: a bf16 tensor's sum, best of five."""
    data = torch.ones(megabytes * 2**19, dtype=torch.bfloat16)
    return data.numel() * 2 / best_us(lambda: data.sum(), 5) / 1e3


def kernel_cell(rows: int, width: int, calls: int, pairs: int) -> dict[str, Any]:
    """Both kernels on one layer's call at ``rows`` x ``width``, alternating ``pairs`` times."""
    gen = torch.Generator().manual_seed(rows * 7919 + width)
    cols = width + 8
    keys = [torch.randn(rows, KV_HEADS, cols, HEAD_DIM, generator=gen).to(torch.bfloat16) for _ in range(LAYERS)]
    values = [torch.randn(rows, KV_HEADS, cols, HEAD_DIM, generator=gen).to(torch.bfloat16) for _ in range(LAYERS)]
    q = torch.randn(rows, HEADS, HEAD_DIM, generator=gen).to(torch.bfloat16)
    table = decode_token_table(torch.full((rows,), width - 1), width - 1, width, KV_HEADS, cols)
    forms = {"agentrl": SglangCpuKernels(native=True), "sglang": SglangCpuKernels(native=False)}
    want = reference_attention(q, keys[0], values[0], table.seq_lens, width - 1, HEAD_DIM**-0.5)
    gaps = {
        name: (kernels.decode_attention(q, keys[0], values[0], table, HEAD_DIM**-0.5).float() - want).abs().max().item()
        for name, kernels in forms.items()
    }
    layer = iter(range(10**12))

    def one_call(kernels: SglangCpuKernels) -> None:
        i = next(layer) % LAYERS
        kernels.decode_attention(q, keys[i], values[i], table, HEAD_DIM**-0.5)

    times: dict[str, list[float]] = {name: [] for name in forms}
    for pair in range(pairs):
        for name in list(forms) if pair % 2 == 0 else list(forms)[::-1]:
            times[name].append(best_us(lambda k=forms[name]: one_call(k), calls))
    kv_bytes = rows * KV_HEADS * width * HEAD_DIM * 2 * 2
    us = {name: statistics.median(v) for name, v in times.items()}
    return {
        "rows": rows,
        "width": width,
        "us": us,
        "kv_gb_s": {name: kv_bytes / t / 1e3 for name, t in us.items()},
        "sglang_over_agentrl": us["sglang"] / us["agentrl"],
        "max_gap_to_float32": gaps,
    }


def matmul_cell(rows: int, shapes: list[tuple[int, int]], pairs: int) -> dict[str, Any]:
    """Every layer's projections at ``rows`` rows on both matmuls (30 layers' weights: from memory, not cache)."""
    gen = torch.Generator().manual_seed(rows)
    weights = [
        [(0.05 * torch.randn(shape, generator=gen)).to(torch.bfloat16) for shape in shapes] for _ in range(LAYERS)
    ]
    forms = {"agentrl": SglangCpuKernels(native=True), "sglang": SglangCpuKernels(native=False)}
    packed = {name: [[k.pack(w) for w in layer] for layer in weights] for name, k in forms.items()}
    inputs = {k: torch.randn(rows, k, generator=gen).to(torch.bfloat16) for k in {s[1] for s in shapes}}

    def all_layers(name: str) -> float:
        kernels, started = forms[name], time.perf_counter()
        for layer in packed[name]:
            for (_, k), weight in zip(shapes, layer):
                kernels.linear(inputs[k], weight, None)
        return (time.perf_counter() - started) * 1e3

    times: dict[str, list[float]] = {name: [] for name in forms}
    for pair in range(pairs + 1):
        for name in list(forms) if pair % 2 == 0 else list(forms)[::-1]:
            took = all_layers(name)
            if pair:  # the first pair warms up
                times[name].append(took)
    ms = {name: statistics.median(v) for name, v in times.items()}
    params = LAYERS * sum(n * k for n, k in shapes)
    return {
        "rows": rows,
        "ms": ms,
        "gflop_s": {name: 2 * rows * params / t / 1e6 for name, t in ms.items()},
        "weight_gb_s": {name: 2 * params / t / 1e6 for name, t in ms.items()},
        "sglang_over_agentrl": ms["sglang"] / ms["agentrl"],
    }


def engine_runners(model: torch.nn.Module, batch: int, max_seq_len: int) -> dict[str, ModelRunner]:
    """The three forms: ``off``, ``python_loop`` (agentrl's kernels, the Python loop) and ``on``."""
    runners = {
        name: ModelRunner(model, max_seq_len=max_seq_len, max_rows=batch, native_kernels=setting)
        for name, setting in (("off", "off"), ("python_loop", "on"), ("on", "on"))
    }
    runners["python_loop"].lean.native_loop = False
    return runners


def engine_cells(model: torch.nn.Module, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Decode steps in each form at every batch and prompt length, in ``args.pairs`` rounds (order rotating)."""
    cells = []
    for prompt in args.prompts:
        for batch in args.batches:
            runners = engine_runners(model, batch, prompt + args.steps + 8)
            times: dict[str, list[float]] = {name: [] for name in runners}
            for runner in runners.values():
                step_ms(runner, batch, prompt, args.steps)  # warm-up: packed weights, allocator
            names = list(runners)
            for round_ in range(args.pairs):
                for name in names[round_ % 3 :] + names[: round_ % 3]:
                    times[name].append(step_ms(runners[name], batch, prompt, args.steps))
            medians = {name: statistics.median(v) for name, v in times.items()}
            cells.append(
                {"batch": batch, "prompt": prompt, "step_ms": medians, "off_over_on": medians["off"] / medians["on"],
                 "off_over_python_loop": medians["off"] / medians["python_loop"]}
            )  # fmt: skip
    return cells


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="models/smollm2-135m-instruct")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 24])
    parser.add_argument("--widths", type=int, nargs="+", default=[96, 512])
    parser.add_argument("--prompts", type=int, nargs="+", default=[32, 400])
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=63)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.quick:
        args.batches, args.widths, args.prompts, args.pairs, args.steps = [1, 3], [20], [8], 2, 4
    torch.set_num_threads(args.threads)
    problem = kernels_problem(torch.bfloat16, torch.device("cpu")) or native_problem()
    if problem is not None:
        print(f"both kernels must run here to compare them: {problem}", file=sys.stderr)
        return 2
    bandwidth = read_gb_s(16 if args.quick else 256)
    hidden, inter = (64, 128) if args.quick else (576, 1536)
    shapes = [
        (hidden + 2 * 192 if not args.quick else 128, hidden),
        (hidden, hidden),
        (2 * inter, hidden),
        (hidden, inter),
    ]
    matmul = [matmul_cell(r, shapes, args.pairs) for r in args.batches]
    kernel = [kernel_cell(r, w, 20 if args.quick else 200, args.pairs) for r in args.batches for w in args.widths]
    for cell in kernel:
        cell["fraction_of_read_bandwidth"] = {name: v / bandwidth for name, v in cell["kv_gb_s"].items()}
    report = {
        "settings": vars(args),
        "openmp": wait_policy(os.environ),
        "read_gb_s": bandwidth,
        "matmul": matmul,
        "kernel": kernel,
        "engine": engine_cells(load_model(args), args),
    }
    emit_json(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
