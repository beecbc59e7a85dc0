"""Where an embedded-engine decode step's time goes (``bench/bench_roofline.py --profile``)."""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import torch

from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.engines.embedded.engine import EmbeddedEngine


async def timed_generate(engine: EmbeddedEngine, prompts: list[list[int]], new_tokens: int) -> tuple[float, int]:
    """Wall seconds and tokens produced for ``prompts`` sent at once, each decoding ``new_tokens`` (T=1)."""
    from agentrl.engines.base import SamplingParams

    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, ignore_eos=True)
    started = time.perf_counter()
    results = await asyncio.gather(*(engine.generate(p, params) for p in prompts))
    return time.perf_counter() - started, sum(len(r.output_ids) for r in results)


def _engine_step_s(
    model_dir: str, dtype: torch.dtype, batch: int, args: argparse.Namespace
) -> tuple[float, list[list[int]]]:
    """Seconds a decode step takes through the engine, from the best of three one-token and ``new_tokens`` generates
    (one pair's difference can be noise, even negative in --quick mode); and the prompts it used."""
    config = EmbeddedEngineConfig(max_batch_size=batch, prefix_cache_tokens=0, share_prefixes=False)
    engine = EmbeddedEngine.from_pretrained(model_dir, config=config, dtype=dtype)
    prompts = [[(7 * i + j) % engine.vocab_size for j in range(args.decode_prompt)] for i in range(batch)]

    async def through_engine() -> float:
        await timed_generate(engine, prompts, 4)
        bases, fulls = [], []
        for _ in range(max(3, args.repeats)):
            bases.append((await timed_generate(engine, prompts, 1))[0])
            fulls.append((await timed_generate(engine, prompts, args.new_tokens))[0])
        return (min(fulls) - min(bases)) / (args.new_tokens - 1)

    try:
        return asyncio.run(through_engine()), prompts
    finally:
        asyncio.run(engine.close())


def profile_decode(model_dir: str, dtype: torch.dtype, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """Where a decode step's time goes, at ``batch`` rows.

    ``engine_step_ms``: a step through the engine (scheduler thread, sampling, bookkeeping), from the best of three
    one-token and ``new_tokens`` generates;
    ``bare_step_ms``: the same forward + sampling driven directly (``ModelRunner.decode`` + ``sample_tokens``),
    so the difference is the scheduler's per-step Python; ``op_share``: the profiler's self CPU time per op
    family over the bare steps' wall time (``all_ops`` below 1: Python between the ops); ``top_ops``: the ten
    costliest ops. The profiled steps run the lean forward's Python loop (``python_loop_step_ms`` unprofiled): the C++
    loop of agentrl's kernels calls them out of the profiler's sight.
    """
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoModelForCausalLM

    from agentrl.engines.embedded.runner import ModelRunner
    from agentrl.engines.embedded.sampling import RowSampling, SamplingPlan, sample_tokens

    engine_step_s, prompts = _engine_step_s(model_dir, dtype, batch, args)
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
    native_loop = runner.lean is not None and runner.lean.native_loop
    if native_loop:
        runner.lean.native_loop = False
    python_loop_s = min(decode_steps() for _ in range(args.repeats))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        profiled_s = decode_steps()
    return {
        "batch": batch,
        "engine_step_ms": engine_step_s * 1e3,
        "bare_step_ms": bare_s * 1e3 / (args.new_tokens - 1),
        "python_loop_step_ms": python_loop_s * 1e3 / (args.new_tokens - 1) if native_loop else None,
        **_op_shares(prof, profiled_s * 1e6),
    }


_OP_FAMILIES = {
    "matmul": (
        "aten::addmm",
        "aten::mm",
        "aten::linear",
        "aten::matmul",
        "aten::bmm",
        "mkldnn::_linear_pointwise",  # oneDNN's packed bf16 matmul (engine.pack_weights)
        "sgl_kernel::weight_packed_linear",  # SGLang's (engine.cpu_kernels)
        "agentrl::linear",  # agentrl's own (engine.native_kernels); agentrl::linear_fp32 matches it too
    ),
    "attention": (
        "aten::_scaled_dot_product",
        "aten::scaled_dot_product",
        "sgl_kernel::decode_attention_cpu",
        "agentrl::decode_attention",
    ),
    "norms_and_activation": ("sgl_kernel::rmsnorm_cpu", "sgl_kernel::fused_add_rmsnorm_cpu", "sgl_kernel::silu"),
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
