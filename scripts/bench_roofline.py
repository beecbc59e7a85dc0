#!/usr/bin/env python
"""The CPU loop against this machine's roofline, fp32 and bf16 side by side in one run, as one JSON.

1. machine: memory bandwidth (a large tensor copy) and GEMM rates per dtype, at ``N^3`` and at the
   model's decode shape (batch x hidden x intermediate);
2. engine decode at each batch size: tokens/s and its fraction of the roofline, where one decode step
   costs ``max(weight bytes / bandwidth, batch x 2 x params / decode-shape GEMM rate)``;
3. engine prefill: prompt tokens/s against ``2 x params`` FLOPs a token at the ``N^3`` GEMM rate;
4. trainer forward+backward (``PolicyLogprobs``, fp32 master weights; bf16 = autocast): tokens/s and a
   CPU "MFU" (``6 x params`` FLOPs a token, 8 with activation checkpointing, at the ``N^3`` GEMM rate),
   with and without activation checkpointing.

Every fraction is measured / roofline, so numbers from a loaded machine still compare across dtypes
within one run. ``--quick`` uses tiny shapes (for the test), not meaningful numbers.

Usage: .venv/bin/python scripts/bench_roofline.py [--model DIR] [--threads 2] [--out roofline.json]
(default model: a tiny random Qwen3 built into a temporary directory; pass SmolLM2 for real numbers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from agentrl.engines.base import SamplingParams
from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.engines.embedded.engine import EmbeddedEngine
from agentrl.models.loading import set_activation_checkpointing
from agentrl.trainer.logprobs import PolicyLogprobs

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def best_time(fn: Any, repeats: int) -> float:
    """Fastest of ``repeats`` timed calls after one warm-up (the least disturbed by other load)."""
    fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def bandwidth_gb_s(megabytes: int, repeats: int) -> float:
    """Bytes read + written per second by a copy of a ``megabytes`` fp32 tensor (larger than the caches)."""
    src = torch.ones(megabytes * 2**20 // 4)
    dst = torch.empty_like(src)
    seconds = best_time(lambda: dst.copy_(src), repeats)
    return 2 * src.numel() * 4 / seconds / 1e9


def gemm_gflop_s(m: int, k: int, n: int, dtype: torch.dtype, repeats: int) -> float:
    """GFLOP/s of ``[m, k] @ [k, n]`` in ``dtype`` (``2 m k n`` FLOPs)."""
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    inner = max(1, int(2e8 // (2 * m * k * n)))  # small shapes: repeat inside one timing to beat the clock
    seconds = best_time(lambda: [torch.mm(a, b) for _ in range(inner)], repeats) / inner
    return 2 * m * k * n / seconds / 1e9


def count_params(model: torch.nn.Module) -> dict[str, int]:
    """Unique parameters, and those a decode step multiplies by (all but an untied input embedding)."""
    total = sum(p.numel() for p in model.parameters())  # tied weights are counted once
    embed = model.get_input_embeddings().weight
    tied = embed.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    return {"total": total, "matmul": total if tied else total - embed.numel()}


def machine(arch: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Bandwidth and the GEMM rates of each dtype at N^3 and at the decode shape of each batch size.

    A dtype whose 256^3 GEMM is slower than fp32's (bf16 emulated on a CPU without bf16 units) is timed at
    ``min(N, 512)^3`` instead (``gemm_measured_at``): at N = 2048 one emulated product takes minutes.
    """
    hidden, inter = int(arch["hidden_size"]), int(arch["intermediate_size"])
    probe = {name: gemm_gflop_s(256, 256, 256, dtype, args.repeats) for name, dtype in DTYPES.items()}
    out: dict[str, Any] = {
        "bandwidth_gb_s": bandwidth_gb_s(args.copy_mb, args.repeats),
        "gemm_probe_256^3_gflop_s": probe,
        "gemm_gflop_s": {},
        "gemm_measured_at": {},
    }
    for name, dtype in DTYPES.items():
        size = args.gemm if probe[name] >= probe["fp32"] or args.bf16 == "always" else min(args.gemm, 512)
        out["gemm_measured_at"][name] = size
        rates = {f"{args.gemm}^3": gemm_gflop_s(size, size, size, dtype, args.repeats)}
        for batch in args.batches:
            rates[f"decode_b{batch}_{hidden}x{inter}"] = gemm_gflop_s(batch, hidden, inter, dtype, args.repeats)
        out["gemm_gflop_s"][name] = rates
    out["bf16_over_fp32"] = {
        k: out["gemm_gflop_s"]["bf16"][k] / out["gemm_gflop_s"]["fp32"][k] for k in out["gemm_gflop_s"]["fp32"]
    }
    return out


def decode_roofline_tok_s(params: dict[str, int], dtype_bytes: int, batch: int, bw: float, gemm: float) -> float:
    """Tokens/s of a decode step bound by reading the weights or by the decode-shape GEMM rate."""
    step_s = max(params["total"] * dtype_bytes / (bw * 1e9), batch * 2 * params["matmul"] / (gemm * 1e9))
    return batch / step_s


async def _timed_generate(engine: EmbeddedEngine, prompts: list[list[int]], new_tokens: int) -> tuple[float, int]:
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, ignore_eos=True)
    started = time.perf_counter()
    results = await asyncio.gather(*(engine.generate(p, params) for p in prompts))
    return time.perf_counter() - started, sum(len(r.output_ids) for r in results)


def engine_numbers(model_dir: str, dtype: torch.dtype, args: argparse.Namespace) -> dict[str, Any]:
    """Decode tokens/s at each batch size and prefill tokens/s of the embedded engine in ``dtype``."""
    config = EmbeddedEngineConfig(max_batch_size=max(args.batches), prefix_cache_tokens=0, share_prefixes=False)
    engine = EmbeddedEngine.from_pretrained(model_dir, config=config, dtype=dtype)
    vocab = engine.vocab_size

    async def run() -> dict[str, Any]:
        await _timed_generate(engine, [[1, 2, 3]], 4)  # warm-up: threads, allocator
        decode = {}
        for batch in args.batches:
            prompts = [[(7 * i + j) % vocab for j in range(args.decode_prompt)] for i in range(batch)]
            # decode alone: a run of 1 token (the prefill) subtracted from a run of new_tokens
            base, _ = await _timed_generate(engine, prompts, 1)
            full, produced = await _timed_generate(engine, prompts, args.new_tokens)
            decode[batch] = (produced - batch) / max(full - base, 1e-9)
        prompt = [(3 * j) % vocab for j in range(args.prefill_tokens)]
        seconds = min([(await _timed_generate(engine, [prompt], 1))[0] for _ in range(args.repeats)])
        return {"decode_tok_s": decode, "prefill_tok_s": args.prefill_tokens / seconds}

    try:
        return asyncio.run(run())
    finally:
        asyncio.run(engine.close())


def profile_decode(model_dir: str, dtype: torch.dtype, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """Where a decode step's time goes, at ``batch`` rows.

    ``engine_step_ms``: a step through the engine (scheduler thread, sampling, bookkeeping);
    ``bare_step_ms``: the same forward + sampling driven directly (``ModelRunner.decode`` + ``sample_tokens``),
    so the difference is the scheduler's per-step Python; ``op_share``: the profiler's self CPU time per op
    family over the bare steps' wall time (``all_ops`` below 1: Python between the ops); ``top_ops``: the ten
    costliest ops.
    """
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoModelForCausalLM

    from agentrl.engines.embedded.runner import ModelRunner
    from agentrl.engines.embedded.sampling import RowSampling, SamplingPlan, sample_tokens

    config = EmbeddedEngineConfig(max_batch_size=batch, prefix_cache_tokens=0, share_prefixes=False)
    engine = EmbeddedEngine.from_pretrained(model_dir, config=config, dtype=dtype)
    prompts = [[(7 * i + j) % engine.vocab_size for j in range(args.decode_prompt)] for i in range(batch)]

    async def through_engine() -> float:
        await _timed_generate(engine, prompts, 4)
        base, _ = await _timed_generate(engine, prompts, 1)
        full, _ = await _timed_generate(engine, prompts, args.new_tokens)
        return (full - base) / (args.new_tokens - 1)

    try:
        engine_step_s = asyncio.run(through_engine())
    finally:
        asyncio.run(engine.close())
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    runner = ModelRunner(model, max_seq_len=args.decode_prompt + 2 * args.new_tokens + 8, max_rows=batch)
    plan = SamplingPlan([RowSampling(1.0, 0, 1.0, None)] * batch, runner.device)
    gen = torch.Generator().manual_seed(0)

    def decode_steps() -> float:
        runner.clear()
        tokens = sample_tokens(runner.prefill(prompts), plan, gen)[0].tolist()
        started = time.perf_counter()
        for _ in range(args.new_tokens - 1):
            tokens = sample_tokens(runner.decode(tokens), plan, gen)[0].tolist()
        return time.perf_counter() - started

    decode_steps()  # warm-up
    bare_s = min(decode_steps() for _ in range(args.repeats))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        profiled_s = decode_steps()
    return {
        "batch": batch,
        "engine_step_ms": engine_step_s * 1e3,
        "bare_step_ms": bare_s * 1e3 / (args.new_tokens - 1),
        **_op_shares(prof, profiled_s * 1e6),
    }


_OP_FAMILIES = {
    "matmul": ("aten::addmm", "aten::mm", "aten::linear", "aten::matmul", "aten::bmm"),
    "attention": ("aten::_scaled_dot_product", "aten::scaled_dot_product"),
    "sampling": ("aten::softmax", "aten::_softmax", "aten::cumsum", "aten::searchsorted", "aten::log", "aten::rand"),
    "kv_cache": ("aten::index_put", "aten::_index_put", "aten::copy_", "aten::slice_scatter", "aten::cat"),
}


def _op_shares(prof: Any, wall_us: float) -> dict[str, Any]:
    ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    share = {name: 0.0 for name in _OP_FAMILIES}
    for event in ops:
        for name, prefixes in _OP_FAMILIES.items():
            if event.key.startswith(prefixes):
                share[name] += event.self_cpu_time_total / wall_us
    share["all_ops"] = sum(e.self_cpu_time_total for e in ops) / wall_us
    top = [{"op": e.key, "calls": e.count, "share": e.self_cpu_time_total / wall_us} for e in ops[:10]]
    return {"op_share": share, "top_ops": top}


def train_tok_s(model_dir: str, precision: str, checkpointing: bool, args: argparse.Namespace) -> float:
    """Forward+backward tokens/s of the trainer's logprob forward (fp32 weights; bf16 = CPU autocast)."""
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    set_activation_checkpointing(lm, checkpointing)
    lm.train()
    policy = PolicyLogprobs(lm)
    vocab = lm.get_output_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (args.train_batch, args.train_seq))
    select = torch.ones(args.train_batch, args.train_seq - 1, dtype=torch.bool)

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = policy(ids, select, 1.0)
        out.logp_bt.sum().backward()
        lm.zero_grad(set_to_none=True)

    return args.train_batch * args.train_seq / best_time(step, args.repeats)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement and its roofline fraction, as one JSON-ready dict."""
    torch.set_num_threads(args.threads)
    model_dir = args.model or _tiny_model(args)
    arch = json.loads((Path(model_dir) / "config.json").read_text())
    from transformers import AutoModelForCausalLM

    params = count_params(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32))
    hw = machine(arch, args)
    bw, hidden, inter = hw["bandwidth_gb_s"], arch["hidden_size"], arch["intermediate_size"]
    big = f"{args.gemm}^3"
    dtypes = _dtypes_worth_running(hw, args)
    engine: dict[str, Any] = {}
    for name in dtypes:
        dtype = DTYPES[name]
        got = engine_numbers(model_dir, dtype, args)
        rates = hw["gemm_gflop_s"][name]
        decode = {}
        for batch, tok_s in got["decode_tok_s"].items():
            gemm = rates[f"decode_b{batch}_{hidden}x{inter}"]
            roof = decode_roofline_tok_s(params, dtype.itemsize, batch, bw, gemm)
            fp32_gemm = hw["gemm_gflop_s"]["fp32"][f"decode_b{batch}_{hidden}x{inter}"]
            fp32_roof = decode_roofline_tok_s(params, 4, batch, bw, fp32_gemm)
            decode[f"b{batch}"] = {
                "tok_s": tok_s,
                "roofline_tok_s": roof,
                "fraction": tok_s / roof,
                "fraction_of_fp32_roofline": tok_s / fp32_roof,
            }
        prefill_roof = rates[big] * 1e9 / (2 * params["matmul"])
        engine[name] = {
            "decode": decode,
            "prefill": {
                "tok_s": got["prefill_tok_s"],
                "roofline_tok_s": prefill_roof,
                "fraction": got["prefill_tok_s"] / prefill_roof,
            },
        }
    trainer: dict[str, Any] = {}
    for name in [] if args.skip_trainer else dtypes:
        for checkpointing in (False, True):
            tok_s = train_tok_s(model_dir, name, checkpointing, args)
            flops_per_token = (8 if checkpointing else 6) * params["matmul"]  # a recompute adds one forward
            roof = hw["gemm_gflop_s"][name][big] * 1e9 / flops_per_token
            trainer[f"{name}_{'ckpt' if checkpointing else 'nockpt'}"] = {
                "tok_s": tok_s,
                "roofline_tok_s": roof,
                "mfu": tok_s / roof,
                "fraction_of_fp32_roofline": tok_s / (hw["gemm_gflop_s"]["fp32"][big] * 1e9 / flops_per_token),
            }
    profiles = [profile_decode(model_dir, torch.float32, b, args) for b in args.profile] if args.profile else []
    return {
        "profile_fp32_decode": profiles,
        "machine": {
            **hw,
            "threads": args.threads,
            "cpu_count": os.cpu_count(),
            "load_avg": os.getloadavg(),
            "processor": platform.processor() or platform.machine(),
            "torch": torch.__version__,
        },
        "model": {"path": str(model_dir), "params": params, "hidden": hidden, "intermediate": inter},
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "engine": engine,
        "trainer": trainer,
        "skipped": {name: hw["bf16_skip_reason"] for name in DTYPES if name not in dtypes},
        "bf16_over_fp32": _bf16_ratios(engine, trainer, args.batches) if "bf16" in dtypes and trainer else None,
    }


def _dtypes_worth_running(hw: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """fp32, and bf16 unless its GEMMs are slower than fp32's here (a CPU without bf16 units emulates them,
    tens of times slower: a bf16 SmolLM2 update would take hours); ``--bf16 always|never`` decides instead."""
    ratio = hw["bf16_over_fp32"][f"{args.gemm}^3"]
    slow = ratio < 1.0
    hw["bf16_skip_reason"] = (
        f"bf16 GEMM runs at {ratio:.3f}x fp32 on this CPU "
        f"({torch.backends.cpu.get_cpu_capability()}); --bf16 always runs it anyway"
        if slow
        else "--bf16 never"
    )
    run_bf16 = args.bf16 == "always" or (args.bf16 == "auto" and not slow)
    return ["fp32", "bf16"] if run_bf16 else ["fp32"]


def _bf16_ratios(engine: dict[str, Any], trainer: dict[str, Any], batches: list[int]) -> dict[str, float]:
    out = {
        f"decode_b{b}": engine["bf16"]["decode"][f"b{b}"]["tok_s"] / engine["fp32"]["decode"][f"b{b}"]["tok_s"]
        for b in batches
    }
    out["prefill"] = engine["bf16"]["prefill"]["tok_s"] / engine["fp32"]["prefill"]["tok_s"]
    for c in ("nockpt", "ckpt"):
        out[f"train_{c}"] = trainer[f"bf16_{c}"]["tok_s"] / trainer[f"fp32_{c}"]["tok_s"]
    return out


def _tiny_model(args: argparse.Namespace) -> str:
    from agentrl.models.tiny import make_tiny_model

    directory = Path(tempfile.mkdtemp(prefix="roofline-model-"))
    size = 64 if args.quick else 256
    return str(make_tiny_model(directory, hidden_size=size, num_layers=2 if args.quick else 4))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line settings; ``--quick`` shrinks every shape (for the test)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="Hugging Face model directory (default: a tiny random one).")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--quick", action="store_true", help="Tiny shapes: checks the script runs, nothing more.")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 24])
    parser.add_argument(
        "--bf16",
        choices=("auto", "always", "never"),
        default="auto",
        help="Measure the engine and trainer in bf16 too: auto = only where bf16 GEMMs beat fp32 ones.",
    )
    parser.add_argument("--gemm", type=int, default=None, help="Square GEMM size (default 2048; --quick 128).")
    parser.add_argument("--profile", type=int, nargs="*", default=[], help="Profile fp32 decode at these batches.")
    parser.add_argument("--skip-trainer", action="store_true", help="Engine and machine numbers only.")
    parser.add_argument("--out", default=None, help="Write the JSON here too.")
    args = parser.parse_args(argv)
    big = not args.quick
    args.copy_mb = 256 if big else 16
    args.gemm = args.gemm or (2048 if big else 128)
    args.repeats = 3 if big else 1
    args.decode_prompt = 32 if big else 8
    args.new_tokens = 64 if big else 6
    args.prefill_tokens = 512 if big else 32
    args.train_batch, args.train_seq = (2, 256) if big else (2, 32)
    return args


def main(argv: list[str] | None = None) -> None:
    """Run, print the JSON, and write it to ``--out`` when given."""
    args = parse_args(argv)
    report = run(args)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
