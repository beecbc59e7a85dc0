#!/usr/bin/env python
"""The portable float32 decode loop in C++ against the Python reference loop, side by side in one process, per
instruction-set kind, as JSON.

One runner per batch size decodes a fixed prompt set; its lean forward's ``native_loop`` switches between the C++ loop
(``agentrl/engines/embedded/cpu/portable.py``) and the Python loop round after round (the first form alternating), so
a load that wanders moves both; ``python_over_cpp`` is the median step of the Python loop over the median of the C++
loop. ``profile``: the profiler's op shares over one run of C++-loop steps (matmul, attention, norms, ...; ``all_ops``
below 1 is time outside torch's ops), where the rest of a step goes. ``--kinds native avx2`` runs each kind in its
own process (``roofline_kinds.KIND_ENV``: ``avx2`` forces the portable path on an AVX-512 CPU).

Usage: .venv/bin/python bench/bench_portable_loop.py --model models/smollm2-135m-instruct [--kinds native avx2]
[--batches 1 8 24] [--pairs 6] [--out portable.json]; ``--quick``: a tiny random Llama.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from agentrl.util.openmp_env import short_spin_unless_chosen

os.environ.update(short_spin_unless_chosen(os.environ))  # the agentrl command's OpenMP wait policy, before torch

import torch
from bench_small_ops import emit_json, step_ms
from roofline_kinds import KIND_ENV
from roofline_profile import _op_shares

from agentrl.engines.embedded.runner import ModelRunner
from agentrl.engines.embedded.sampling import RowSampling, SamplingPlan, sample_tokens


def load_fp32(args: argparse.Namespace) -> torch.nn.Module:
    """SmolLM2 (``--model``) in float32, or with ``--quick`` a tiny random Llama."""
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    if not args.quick:
        return AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    config = LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    return LlamaForCausalLM(config).eval()


def cell(model: torch.nn.Module, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """Median decode-step ms of each loop at ``batch`` rows, their ratio, and the C++ loop's op shares."""
    runner = ModelRunner(model, max_seq_len=args.prompt + args.steps + 8, max_rows=batch)
    if runner.lean is None or not runner.lean.native_loop:
        return {"batch": batch, "skipped": runner.native_problem}
    times: dict[str, list[float]] = {"cpp": [], "python": []}
    forms = [("cpp", True), ("python", False)]
    for pair in range(args.pairs + 1):
        for name, native in forms if pair % 2 == 0 else forms[::-1]:
            runner.lean.native_loop = native
            took = step_ms(runner, batch, args.prompt, args.steps)
            if pair:  # the first pair warms up
                times[name].append(took)
    runner.lean.native_loop = True
    ms = {name: statistics.median(v) for name, v in times.items()}
    shares = profile(runner, batch, args)
    return {"batch": batch, "step_ms": ms, "python_over_cpp": ms["python"] / ms["cpp"], "profile": shares}


def profile(runner: ModelRunner, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """Op shares of ``args.steps`` decode steps (the prefill before them not profiled); the C++ loop's own op
    (``agentrl::portable_decode_layers``) holds as self time what it spends between torch's ops."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    vocab = runner.model.config.vocab_size
    plan = SamplingPlan([RowSampling(1.0, 0, 1.0, None)] * batch, runner.device)
    generator = torch.Generator().manual_seed(0)
    runner.clear()
    prompts = [[(7 * row + j) % vocab for j in range(args.prompt)] for row in range(batch)]
    tokens = sample_tokens(runner.prefill(prompts), plan, generator)[0].tolist()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        for _ in range(args.steps):
            tokens = sample_tokens(runner.decode(tokens), plan, generator)[0].tolist()
        wall_us = (time.perf_counter() - started) * 1e6
    own = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key == "agentrl::portable_decode_layers")
    return {**_op_shares(prof, wall_us), "cpp_loop_self_share": own / wall_us}


def run_kinds(argv: list[str], kinds: list[str]) -> dict[str, Any]:
    """This script once per kind, each in its own process with the kind's environment."""
    child = [a for a in argv if a not in ("--kinds", *KIND_ENV)]
    out: dict[str, Any] = {}
    for kind in kinds:
        done = subprocess.run(
            [sys.executable, __file__, *child], env={**os.environ, **KIND_ENV[kind]}, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"the {kind} run failed: {done.stderr[-2000:]}")
        out[kind] = json.loads(done.stdout)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="models/smollm2-135m-instruct")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--kinds", nargs="+", choices=tuple(KIND_ENV), default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 24])
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--steps", type=int, default=31)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.kinds:
        emit_json(run_kinds([a for a in sys.argv[1:] if a != args.out and a != "--out"], args.kinds), args.out)
        return 0
    torch.set_num_threads(args.threads)
    model = load_fp32(args)
    cells = [cell(model, batch, args) for batch in args.batches]
    report = {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "load_avg": os.getloadavg(), "cells": cells}
    emit_json({**report, "settings": vars(args)}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
