#!/usr/bin/env python
"""Decode steps on SGLang's CPU kernels with small calls run alone against every call on the OpenMP team, as JSON.

Where OpenMP's team sleeps between regions (``OMP_WAIT_POLICY=PASSIVE``) the embedded engine runs norms, SiLU-and-mul,
rotary and decode attention over a few rows on the calling thread alone (``agentrl/engines/embedded/cpu/omp_team.py``,
thresholds in ``cpu/sglang.py``): a region's wake-up costs more than such a call's work. Under the ``agentrl``
command's short spin it does not; this bench runs them alone under either policy, to show which pays. Both forms
run the same bare decode steps (``ModelRunner.decode`` and sampling, the same prompts and draws) in one process,
alternating, so a machine whose wake-up cost wanders still compares them fairly; ``before_over_after`` is the
median step of the whole-team form over the median of the alone form.

Usage: [OMP_WAIT_POLICY=PASSIVE] .venv/bin/python bench/bench_small_ops.py --model
models/smollm2-135m-instruct [--batches 1 8 24] [--pairs 8] [--out small_ops.json]; ``--quick``: a tiny random Llama.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

from agentrl.util.openmp_env import short_spin_unless_chosen, wait_policy

os.environ.update(short_spin_unless_chosen(os.environ))  # the agentrl command's OpenMP wait policy, before torch

import torch

import agentrl.engines.embedded.cpu.sglang as sglang_kernels
from agentrl.engines.embedded.cpu.omp_team import OmpTeam
from agentrl.engines.embedded.runner import ModelRunner
from agentrl.engines.embedded.sampling import RowSampling, SamplingPlan, sample_tokens

ALONE = {name: getattr(sglang_kernels, name) for name in ("ALONE_MAX_ELEMENTS", "ALONE_MAX_ATTENTION_ROWS",
                                                          "ALONE_MAX_ATTENTION_MACS")}  # fmt: skip
WHOLE_TEAM = dict.fromkeys(ALONE, 0)


def load_model(args: argparse.Namespace) -> torch.nn.Module:
    """SmolLM2 (``--model``) in bf16, or with ``--quick`` a tiny random Llama whose shapes the kernels take (SGLang's
    packed matmul, agentrl's head_dim 64)."""
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    if not args.quick:
        return AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16)
    config = LlamaConfig(vocab_size=320, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
    return LlamaForCausalLM(config).to(torch.bfloat16)


def step_ms(runner: ModelRunner, batch: int, prompt: int, steps: int) -> float:
    """Mean wall ms of ``steps`` decode steps (forward, sampling) after a ``prompt``-token prefill of ``batch`` rows."""
    vocab = runner.model.config.vocab_size
    prompts = [[(7 * row + j) % vocab for j in range(prompt)] for row in range(batch)]
    plan = SamplingPlan([RowSampling(1.0, 0, 1.0, None)] * batch, runner.device)
    generator = torch.Generator().manual_seed(0)
    runner.clear()
    tokens = sample_tokens(runner.prefill(prompts), plan, generator)[0].tolist()
    started = time.perf_counter()
    for _ in range(steps):
        tokens = sample_tokens(runner.decode(tokens), plan, generator)[0].tolist()
    return (time.perf_counter() - started) / steps * 1e3


def emit_json(report: dict[str, Any], out: str | None) -> None:
    """Print the report as JSON, and write it to ``out`` when given."""
    text = json.dumps(report, indent=1)
    if out:
        with open(out, "w") as handle:
            handle.write(text)
    print(text)


def compare(runner: ModelRunner, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """Median step ms of each form over ``args.pairs`` alternating pairs (which goes first alternates too)."""
    times: dict[str, list[float]] = {"whole_team": [], "alone": []}
    forms = [("whole_team", WHOLE_TEAM), ("alone", ALONE)]
    step_ms(runner, batch, args.prompt, args.steps)  # warm-up: packed weights, allocator
    for pair in range(args.pairs):
        for name, thresholds in forms if pair % 2 == 0 else forms[::-1]:
            for constant, value in thresholds.items():
                setattr(sglang_kernels, constant, value)
            times[name].append(step_ms(runner, batch, args.prompt, args.steps))
    for constant, value in ALONE.items():
        setattr(sglang_kernels, constant, value)
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "batch": batch,
        "step_ms": medians,
        "before_over_after": medians["whole_team"] / medians["alone"],
        "pairs": [w / a for w, a in zip(times["whole_team"], times["alone"])],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="models/smollm2-135m-instruct")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 24])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--steps", type=int, default=63)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.quick:
        args.pairs, args.steps = 2, 4
    torch.set_num_threads(args.threads)
    model = load_model(args)
    runner = ModelRunner(model, max_seq_len=args.prompt + args.steps + 8, max_rows=max(args.batches))
    if runner.lean is None or runner.lean.kernels is None:
        print(f"SGLang's CPU kernels do not run here: {runner.kernels_problem}", file=sys.stderr)
        return 2
    runner.lean.kernels.team = OmpTeam(sleeps=True)  # the alone form runs alone whatever the wait policy
    report = {
        "settings": vars(args),
        "openmp": wait_policy(os.environ),
        "thresholds": ALONE,
        "batches": [compare(runner, b, args) for b in args.batches],
    }
    emit_json(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
