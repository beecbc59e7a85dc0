#!/usr/bin/env python
"""The device check, prepared for a session that is lent a GPU (one JSON object on stdout).

What a CPU cannot show, measured side by side in one run on a random-weight Qwen3 model of a real shape
(no hub: the default is Qwen3-0.6B's shape, ``--shape qwen3-1.7b`` the next size):

1. the embedded engine on the device in bf16: decode tokens/s against transformers ``generate()`` at
   batch B x N new tokens (sampling on), and the mismatch that matters for training: the engine's bf16
   logprobs against the trainer's (fp32 master weights of the same model under bf16 autocast, the
   trainer's own ``PolicyLogprobs``) on the same completion tokens;
2. one GSPO-token trainer step as training runs it (fp32 master weights, bf16 autocast, gradient
   checkpointing): tokens/s, model FLOPs utilisation (6 x params x completion tokens/s over the device's
   dense bf16 peak: only the trained tokens count; attention FLOPs not counted) and peak memory;
3. the torchrun path: a 2-process FSDP2 step over 2 GPUs (or the NCCL path with one process on 1 GPU),
   through the trainer's own process-group selection (``cpu:gloo,cuda:nccl``) and its CPU-side reductions.

    python bench/bench_device.py --out device.json             # on the GPU machine (a few minutes)
    python bench/bench_device.py --device cpu --shape tiny      # the same code on a CPU (smoke test)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

SHAPES: dict[str, dict[str, int]] = {
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=2052,
    ),
    "qwen3-0.6b": dict(
        hidden_size=1024,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=3072,
        vocab_size=151936,
    ),
    "qwen3-1.7b": dict(
        hidden_size=2048,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=6144,
        vocab_size=151936,
    ),
}
# dense bf16 peak FLOP/s by device name (vendor datasheets); MFU is left out for unknown devices
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12, "L4": 121e12}


def build_model(shape: str, dtype: torch.dtype, device: str) -> torch.nn.Module:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(tie_word_embeddings=True, max_position_embeddings=4096, **SHAPES[shape])
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
    return model.to(dtype).eval()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def decode_bench(model: torch.nn.Module, tokenizer: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Engine vs generate() tokens/s at batch x new tokens, and the engine's logprob gap to an HF forward."""
    from agentrl.engines.base import SamplingParams
    from agentrl.engines.embedded.config import EmbeddedEngineConfig
    from agentrl.engines.embedded.engine import EmbeddedEngine

    vocab = model.config.vocab_size
    prompts = torch.randint(0, vocab, (args.batch, args.prompt_tokens), generator=torch.Generator().manual_seed(1)).to(
        args.device
    )
    kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0)
    model.generate(prompts[:, :8], max_new_tokens=4, min_new_tokens=4, **kwargs)  # warm-up
    _sync(args.device)
    started = time.perf_counter()
    model.generate(prompts, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, **kwargs)
    _sync(args.device)
    hf_tps = args.batch * args.new_tokens / (time.perf_counter() - started)

    engine = EmbeddedEngine(
        model,
        tokenizer,
        EmbeddedEngineConfig(max_batch_size=args.batch, max_seq_len=args.prompt_tokens + args.new_tokens + 8, seed=0),
    )
    sampling = SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True)

    async def run() -> tuple[float, Any]:
        await asyncio.gather(
            *(engine.generate(p[:8], SamplingParams(max_new_tokens=4, ignore_eos=True)) for p in prompts.tolist())
        )
        begun = time.perf_counter()
        results = await asyncio.gather(*(engine.generate(p, sampling) for p in prompts.tolist()))
        _sync(args.device)
        return sum(len(r.output_ids) for r in results) / (time.perf_counter() - begun), results[0]

    try:
        engine_tps, first = asyncio.run(run())
    finally:
        asyncio.run(engine.close())
    return {
        "batch": args.batch,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "hf_generate_tok_s": hf_tps,
        "embedded_tok_s": engine_tps,
        "speedup": engine_tps / hf_tps,
        "lean_forward": engine.runner.lean is not None,
        "logprob_gap_vs_trainer": trainer_gap(args, prompts[0].tolist(), first),
    }


def trainer_gap(args: argparse.Namespace, prompt: list[int], result: Any) -> dict[str, float]:
    """|engine logprob - trainer logprob| over one reply's tokens: the trainer as training runs it (fp32 master
    weights of the same initialisation, bf16 autocast on CUDA, chunked fp32 log-softmax)."""
    from agentrl.trainer.logprobs import PolicyLogprobs

    lm = build_model(args.shape, torch.float32, args.device)
    ids = torch.tensor([prompt + result.output_ids], device=args.device)
    select = torch.zeros(1, ids.shape[1] - 1, dtype=torch.bool, device=args.device)
    select[0, len(prompt) - 1 :] = True
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if args.device.startswith("cuda") else _null()
    with torch.no_grad(), autocast:
        trainer = PolicyLogprobs(lm)(ids, select, temperature=1.0).logp_bt[select]
    gap = (torch.tensor(result.logprobs, device=args.device) - trainer).abs()
    del lm
    return {"max": gap.max().item(), "mean": gap.mean().item(), "tokens": int(gap.numel())}


def _null() -> Any:
    import contextlib

    return contextlib.nullcontext()


def _train_model(args: argparse.Namespace) -> torch.nn.Module:
    lm = build_model(args.shape, torch.float32, args.device)  # fp32 master weights, as the trainer loads them
    if hasattr(lm, "activation_checkpointing_enable"):  # transformers >= 5.x name
        lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return lm.train()


def _rows(args: argparse.Namespace, vocab: int) -> list[Any]:
    """Random sequences whose first 64 tokens are the prompt; advantages +1/-1 alternate."""
    from agentrl.trainer.batch import TrainRow

    gen = torch.Generator().manual_seed(2)
    rows = []
    for i in range(args.train_batch):
        ids = torch.randint(0, vocab, (args.train_seq,), generator=gen).tolist()
        mask = [t >= 63 for t in range(args.train_seq - 1)]
        adv = 1.0 if i % 2 == 0 else -1.0
        logp, turns, advs = [-5.0 if m else 0.0 for m in mask], [0 if m else -1 for m in mask], [adv * m for m in mask]
        rows.append(TrainRow([ids], logp, mask, turns, advs, i))
    return rows


def _fresh(rows: list[Any]) -> list[Any]:
    from agentrl.trainer.batch import TrainRow

    return [TrainRow(r.segments, list(r.logp_old), r.mask, r.turn_ids, r.adv, r.episode_index) for r in rows]


def _updater(policy: torch.nn.Module, args: argparse.Namespace, dist: Any = None) -> Any:
    from agentrl.algos.config import AlgorithmConfig
    from agentrl.config.sections import TrainerConfig
    from agentrl.trainer.distributed import DistInfo
    from agentrl.trainer.update import PolicyUpdater

    trainer = TrainerConfig(lr=1e-6, mini_batches=1, micro_batch_tokens=args.micro_batch_tokens)
    return PolicyUpdater(policy, AlgorithmConfig(), trainer, temperature=1.0, total_steps=10, dist=dist or DistInfo())


def train_bench(args: argparse.Namespace) -> dict[str, Any]:
    """One GSPO-token update as the trainer runs it; tokens/s, MFU, peak memory."""
    from agentrl.trainer.logprobs import PolicyLogprobs

    lm = _train_model(args)
    params = sum(p.numel() for p in lm.parameters())
    rows = _rows(args, lm.config.vocab_size)
    updater = _updater(PolicyLogprobs(lm), args)

    def step() -> float:
        fresh = _fresh(rows)
        _sync(args.device)
        begun = time.perf_counter()
        updater.update(fresh)
        _sync(args.device)
        return time.perf_counter() - begun

    step()  # warm-up (allocator, kernels)
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    seconds = min(step() for _ in range(args.train_repeats))
    tokens = args.train_batch * args.train_seq
    completion = sum(sum(r.mask) for r in rows)  # trained tokens: the prompt's forward is not counted as useful
    out: dict[str, Any] = {
        "params": params,
        "batch": args.train_batch,
        "seq": args.train_seq,
        "step_s": seconds,
        "tokens_per_s": tokens / seconds,
        "completion_tokens_per_s": completion / seconds,
    }
    peak = next((v for k, v in PEAK_BF16.items() if k in _device_name(args.device)), None)
    out["mfu"] = 6 * params * out["completion_tokens_per_s"] / peak if peak else None
    out["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 1e9 if args.device.startswith("cuda") else None
    return out


def fsdp_bench(args: argparse.Namespace) -> dict[str, Any]:
    """torchrun this script in --fsdp-worker mode: 2 processes over 2 GPUs, else 1 (the NCCL path); on CPU 2
    processes with the CUDA backend map forced (gloo standing in for NCCL)."""
    gpus = torch.cuda.device_count() if args.device.startswith("cuda") else 0
    nproc = 2 if gpus >= 2 or gpus == 0 else 1
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    if gpus == 0:
        env["AGENTRL_DIST_DEVICE"] = "cuda"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "fsdp.json"
        port = _free_port()
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(nproc),
            "--master-port",
            str(port),
        ]
        cmd += [__file__, "--fsdp-worker", "--device", args.device, "--shape", args.shape, "--out", str(out)]
        cmd += ["--train-batch", str(args.train_batch), "--train-seq", str(args.train_seq)]
        cmd += ["--micro-batch-tokens", str(args.micro_batch_tokens)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            return {"processes": nproc, "ok": False, "error": done.stderr[-3000:]}
        return {"processes": nproc, "ok": True, **json.loads(out.read_text())}


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fsdp_worker(args: argparse.Namespace) -> None:
    """One rank: the trainer's process group and FSDP2 sharding, one GSPO-token update, rank 0 reports."""
    import torch.distributed as tdist

    from agentrl.trainer.distributed import close_distributed, decoder_layers_of, init_distributed, shard_policy

    dist = init_distributed()
    device = f"cuda:{torch.cuda.current_device()}" if args.device.startswith("cuda") else "cpu"
    args.device = device
    lm = _train_model(args)
    from agentrl.trainer.logprobs import PolicyLogprobs

    policy = shard_policy(PolicyLogprobs(lm), decoder_layers_of(lm))
    updater = _updater(policy, args, dist)
    rows = _rows(args, lm.config.vocab_size)
    updater.update(_fresh(rows))  # warm-up
    _sync(device)
    begun = time.perf_counter()
    metrics = updater.update(_fresh(rows))
    _sync(device)
    seconds = time.perf_counter() - begun
    if dist.is_main:
        report = {"backend": str(tdist.get_backend()), "world": dist.world_size, "step_s": seconds}
        report["loss"], report["grad_norm"] = metrics.get("train/loss"), metrics.get("train/grad_norm")
        report["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 1e9 if device.startswith("cuda") else None
        args.out.write_text(json.dumps(report))
    close_distributed()


def _device_name(device: str) -> str:
    return (
        torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else platform.processor() or "cpu"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b")
    parser.add_argument("--batch", type=int, default=64, help="decode batch")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--train-batch", type=int, default=16)
    parser.add_argument("--train-seq", type=int, default=1024)
    parser.add_argument("--micro-batch-tokens", type=int, default=16384)
    parser.add_argument("--train-repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--fsdp-worker", action="store_true", help="internal: one torchrun rank of the FSDP2 check")
    parser.add_argument("--skip-fsdp", action="store_true", help="leave out the torchrun FSDP2 check")
    args = parser.parse_args()
    if args.fsdp_worker:
        fsdp_worker(args)
        return
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: run with --device cpu --shape tiny for the CPU smoke test")
    from agentrl.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    engine_dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    report: dict[str, Any] = {
        "device": _device_name(args.device),
        "torch": torch.__version__,
        "shape": args.shape,
        "engine_dtype": str(engine_dtype),
    }
    model = build_model(args.shape, engine_dtype, args.device)
    report["decode"] = decode_bench(model, tokenizer, args)
    del model
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    report["train_step"] = train_bench(args)
    if not args.skip_fsdp:
        report["fsdp"] = fsdp_bench(args)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
