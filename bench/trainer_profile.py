#!/usr/bin/env python
"""Where a float32 trainer forward+backward step's time goes (the trainer's logprob forward, ``PolicyLogprobs``, and
its backward), with and without activation checkpointing, as JSON: the profiler's self CPU time per op family over
the step's wall time, the costliest ops, and the step's fraction of this process's ``N^3`` fp32 GEMM rate (``6 x
params`` FLOPs a token, 8 with checkpointing). Run it under the AVX2-forcing environment (``roofline_kinds.KIND_ENV``)
to see the portable path's profile on an AVX-512 machine.

Usage: .venv/bin/python bench/trainer_profile.py --model models/smollm2-135m-instruct [--shape 2 256] [--out t.json]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch

from agentrl.models.loading import set_activation_checkpointing
from agentrl.trainer.logprobs import PolicyLogprobs

FAMILIES = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul"),
    "attention": ("aten::_scaled_dot_product", "aten::scaled_dot_product", "aten::_efficient_attention"),
    "softmax_logprobs": ("aten::_log_softmax", "aten::log_softmax", "aten::_softmax", "aten::gather", "aten::logsum"),
    "elementwise": ("aten::mul", "aten::add", "aten::silu", "aten::pow", "aten::rsqrt", "aten::mean", "aten::sum"),
    "copies": ("aten::copy_", "aten::cat", "aten::clone", "aten::contiguous", "aten::to", "aten::_to_copy"),
}


def profiled_step(model_dir: str, checkpointing: bool, batch: int, seq: int) -> dict[str, Any]:
    """One warm-up and one profiled forward+backward step; shares of its wall time."""
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    set_activation_checkpointing(lm, checkpointing)
    lm.train()
    policy = PolicyLogprobs(lm)
    vocab = lm.get_output_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(0))
    select = torch.ones(batch, seq - 1, dtype=torch.bool)

    def step() -> float:
        started = time.perf_counter()
        policy(ids, select, 1.0).logp_bt.sum().backward()
        lm.zero_grad(set_to_none=True)
        return time.perf_counter() - started

    step()
    plain_s = min(step() for _ in range(2))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        wall_s = step()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    shares = {name: 0.0 for name in FAMILIES}
    for event in events:
        for name, prefixes in FAMILIES.items():
            if event.key.startswith(prefixes):  # forward and backward kernels alike
                shares[name] += event.self_cpu_time_total / (wall_s * 1e6)
    autograd = sum(e.self_cpu_time_total for e in events if e.key.startswith("autograd::"))
    shares["autograd_bookkeeping"] = autograd / (wall_s * 1e6)
    shares["all_ops"] = sum(e.self_cpu_time_total for e in events) / (wall_s * 1e6)
    top = [{"op": e.key, "calls": e.count, "share": e.self_cpu_time_total / (wall_s * 1e6)} for e in events[:12]]
    params = sum(p.numel() for p in lm.parameters())
    return {"step_s": plain_s, "tok_s": batch * seq / plain_s, "params": params, "op_share": shares, "top_ops": top}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="models/smollm2-135m-instruct")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shape", type=int, nargs=2, default=(2, 256))
    parser.add_argument("--gemm", type=int, default=2048)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    a, b = torch.randn(args.gemm, args.gemm), torch.randn(args.gemm, args.gemm)
    torch.mm(a, b)
    started = time.perf_counter()
    torch.mm(a, b)
    gemm = 2 * args.gemm**3 / (time.perf_counter() - started) / 1e9
    report: dict[str, Any] = {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "gemm_gflop_s": gemm}
    for checkpointing in (False, True):
        cell = profiled_step(args.model, checkpointing, *args.shape)
        cell["mfu"] = cell["tok_s"] * (8 if checkpointing else 6) * cell["params"] / (gemm * 1e9)
        report["ckpt" if checkpointing else "nockpt"] = cell
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text)


if __name__ == "__main__":
    main()
