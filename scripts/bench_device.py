#!/usr/bin/env python
"""The device check, prepared for a session that is lent a GPU (one JSON object on stdout).

What a CPU cannot show, measured side by side in one run on a random-weight Qwen3 model of a real shape
(no hub: the default is Qwen3-0.6B's shape, ``--shape qwen3-1.7b`` the next size):

1. the embedded engine on the device in bf16: decode tokens/s against transformers ``generate()`` at
   batch B x N new tokens (sampling on), and the gap between the engine's logprobs and an HF forward;
2. one GSPO-token trainer step as training runs it (fp32 master weights, bf16 autocast, gradient
   checkpointing): tokens/s, model FLOPs utilisation (6 x params x tokens/s over the device's dense
   bf16 peak; attention FLOPs not counted) and peak memory.

    python scripts/bench_device.py --out device.json             # on the GPU machine (a few minutes)
    python scripts/bench_device.py --device cpu --shape tiny      # the same code on a CPU (smoke test)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
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
    from agentrl.config.sections import EngineConfig
    from agentrl.engines.base import SamplingParams
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
        EngineConfig(max_batch_size=args.batch, max_seq_len=args.prompt_tokens + args.new_tokens + 8, seed=0),
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
    prompt = prompts[0].tolist()
    with torch.no_grad():
        logits = (
            model(torch.tensor([prompt + first.output_ids], device=args.device)).logits[0, len(prompt) - 1 : -1].float()
        )
    ref = (
        torch.log_softmax(logits, -1).gather(1, torch.tensor(first.output_ids, device=args.device)[:, None]).squeeze(1)
    )
    gap = (torch.tensor(first.logprobs, device=args.device) - ref).abs()
    return {
        "batch": args.batch,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": args.new_tokens,
        "hf_generate_tok_s": hf_tps,
        "embedded_tok_s": engine_tps,
        "speedup": engine_tps / hf_tps,
        "lean_forward": engine.runner.lean is not None,
        "logprob_gap_vs_hf_forward": {"max": gap.max().item(), "mean": gap.mean().item()},
    }


def train_bench(args: argparse.Namespace) -> dict[str, Any]:
    """One GSPO-token update as the trainer runs it; tokens/s, MFU, peak memory."""
    from agentrl.config.sections import AlgorithmConfig, TrainerConfig
    from agentrl.trainer.batch import TrainRow
    from agentrl.trainer.logprobs import PolicyLogprobs
    from agentrl.trainer.update import PolicyUpdater

    lm = build_model(args.shape, torch.float32, args.device)  # fp32 master weights, as the trainer loads them
    if hasattr(lm, "activation_checkpointing_enable"):  # transformers >= 5.x name
        lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lm.train()
    params = sum(p.numel() for p in lm.parameters())
    gen = torch.Generator().manual_seed(2)
    rows = []
    for i in range(args.train_batch):
        ids = torch.randint(0, lm.config.vocab_size, (args.train_seq,), generator=gen).tolist()
        mask = [t >= 63 for t in range(args.train_seq - 1)]
        adv = 1.0 if i % 2 == 0 else -1.0
        rows.append(
            TrainRow(
                [ids],
                [-5.0 if m else 0.0 for m in mask],
                mask,
                [0 if m else -1 for m in mask],
                [adv if m else 0.0 for m in mask],
                i,
            )
        )
    updater = PolicyUpdater(
        PolicyLogprobs(lm),
        AlgorithmConfig(),
        TrainerConfig(lr=1e-6, mini_batches=1, micro_batch_tokens=args.micro_batch_tokens),
        temperature=1.0,
        total_steps=10,
    )

    def step() -> float:
        fresh = [TrainRow(r.segments, list(r.logp_old), r.mask, r.turn_ids, r.adv, r.episode_index) for r in rows]
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
    out: dict[str, Any] = {
        "params": params,
        "batch": args.train_batch,
        "seq": args.train_seq,
        "step_s": seconds,
        "tokens_per_s": tokens / seconds,
    }
    peak = next((v for k, v in PEAK_BF16.items() if k in _device_name(args.device)), None)
    out["mfu"] = 6 * params * out["tokens_per_s"] / peak if peak else None
    out["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 1e9 if args.device.startswith("cuda") else None
    return out


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
    args = parser.parse_args()
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
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
