#!/usr/bin/env python
"""The CPU loop against this machine's roofline, fp32 and bf16 side by side in one run, as one JSON.

1. machine: memory bandwidth (a large tensor copy) and GEMM rates per dtype, at ``N^3`` and at the decode shape;
2. engine decode at each batch size: tokens/s and its fraction of the roofline, where one decode step
   costs ``max(weight bytes / bandwidth, batch x 2 x params / decode-shape GEMM rate)``;
3. engine prefill: prompt tokens/s against ``2 x params`` FLOPs a token at the ``N^3`` GEMM rate;
4. trainer forward+backward (``PolicyLogprobs``, fp32 master weights; bf16 = autocast), with and without activation
   checkpointing: tokens/s and a CPU "MFU" (``6 x params`` FLOPs a token, 8 with checkpointing, at the N^3 rate);
5. layouts: a decode step's matmuls in each form, streamed over every layer, per dtype and batch (gemm_layouts.py).

Every fraction is measured / roofline, so numbers from a loaded machine still compare across dtypes within one run.
OpenMP waits as under the ``agentrl`` command (a short spin); a PASSIVE team's wake-ups cut the 1-row GEMM rate.
``--quick`` uses tiny shapes (for the test). Usage: .venv/bin/python bench/bench_roofline.py [--model DIR]
[--threads 2] [--out roofline.json] (default: a tiny random Qwen3 in a temporary directory; pass SmolLM2 for real);
``--kinds native avx2``: the whole run once per instruction-set kind, side by side (``roofline_kinds.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentrl.util.openmp_env import short_spin_unless_chosen, wait_policy

os.environ.update(short_spin_unless_chosen(os.environ))  # the agentrl command's OpenMP wait policy, before torch

import torch
from gemm_layouts import layout_rates, model_matmul_shapes, product_calls
from roofline_kinds import KIND_ENV, run_kinds
from roofline_profile import profile_decode, timed_generate
from roofline_ratios import bf16_ratios, decode_ratios

from agentrl.engines.embedded.config import EmbeddedEngineConfig, kv_bytes_per_token
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
    """Bytes read + written per second by a copy of a ``megabytes`` fp32 tensor (larger than the caches), the best
    of ``repeats`` rounds 0.2 s apart: a neighbour's burst read 47 GB/s here where the engine streamed 62."""
    src = torch.ones(megabytes * 2**20 // 4)
    dst = torch.empty_like(src)
    rounds = []
    for _ in range(repeats):
        rounds.append(best_time(lambda: dst.copy_(src), repeats))
        time.sleep(0.2)
    return 2 * src.numel() * 4 / min(rounds) / 1e9


def gemm_gflop_s(m: int, k: int, n: int, dtype: torch.dtype, repeats: int) -> float:
    """GFLOP/s of ``[m, k] @ [k, n]`` in ``dtype`` (``2 m k n`` FLOPs)."""
    a = torch.randn(m, k).to(dtype)
    b = torch.randn(k, n).to(dtype)
    inner = max(1, int(2e8 // (2 * m * k * n)))  # small shapes: repeat inside one timing to beat the clock
    seconds = best_time(lambda: [torch.mm(a, b) for _ in range(inner)], repeats) / inner
    return 2 * m * k * n / seconds / 1e9


def decode_gemm_gflop_s(m: int, k: int, n: int, dtype: torch.dtype, repeats: int) -> float:
    """The best GFLOP/s of ``[m, k] x [k, n]`` over the forms an engine can choose (``gemm_layouts.forms_for``), with
    the ``[n, k]`` weight in the cache: a few-row product's compute rate, not its weights' streaming."""
    x = torch.randn(m, k).to(dtype)
    weight = torch.randn(n, k).to(dtype)
    flops = 2 * m * k * n
    inner = max(1, int(2e8 // flops))
    forms = product_calls(x, weight)
    return max(flops / (best_time(lambda f=f: [f() for _ in range(inner)], repeats) / inner) / 1e9 for f in forms)


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
            rates[f"decode_b{batch}_{hidden}x{inter}"] = decode_gemm_gflop_s(batch, hidden, inter, dtype, args.repeats)
        out["gemm_gflop_s"][name] = rates
    out["bf16_over_fp32"] = {
        k: out["gemm_gflop_s"]["bf16"][k] / out["gemm_gflop_s"]["fp32"][k] for k in out["gemm_gflop_s"]["fp32"]
    }
    return out


def decode_roofline_tok_s(params: dict[str, int], dtype_bytes: int, batch: int, bw: float, gemm: float) -> float:
    """Tokens/s of a decode step bound by reading the weights or by the decode-shape GEMM rate."""
    step_s = max(params["total"] * dtype_bytes / (bw * 1e9), batch * 2 * params["matmul"] / (gemm * 1e9))
    return batch / step_s


def engine_numbers(
    model_dir: str, dtype: torch.dtype, args: argparse.Namespace, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Decode tokens/s at each batch size and prefill tokens/s of the embedded engine in ``dtype``
    (``overrides``: engine settings other than their defaults)."""
    config = EmbeddedEngineConfig(
        max_batch_size=max(args.batches), prefix_cache_tokens=0, share_prefixes=False, **(overrides or {})
    )
    engine = EmbeddedEngine.from_pretrained(model_dir, config=config, dtype=dtype)
    vocab = engine.vocab_size

    async def run() -> dict[str, Any]:
        await timed_generate(engine, [[1, 2, 3]], 4)  # warm-up: threads, allocator
        decode = {}
        for batch in args.batches:
            prompts = [[(7 * i + j) % vocab for j in range(args.decode_prompt)] for i in range(batch)]
            # decode alone: a run of 1 token (the prefill) subtracted from a run of new_tokens
            base, _ = await timed_generate(engine, prompts, 1)
            full, produced = await timed_generate(engine, prompts, args.new_tokens)
            decode[batch] = (produced - batch) / max(full - base, 1e-9)
        prompt = [(3 * j) % vocab for j in range(args.prefill_tokens)]
        seconds = min([(await timed_generate(engine, [prompt], 1))[0] for _ in range(args.repeats)])
        return {"decode_tok_s": decode, "prefill_tok_s": args.prefill_tokens / seconds}

    try:
        return asyncio.run(run())
    finally:
        asyncio.run(engine.close())


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


def progress(section: str, value: Any) -> None:
    """One JSON line on stderr per finished measurement: a run cut short on a loaded machine still tells."""
    print(json.dumps({"section": section, "value": value}), file=sys.stderr, flush=True)


def engine_section(
    model_dir: str,
    name: str,
    hw: dict[str, Any],
    params: dict[str, int],
    arch: dict[str, Any],
    args: Any,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The engine's decode and prefill tokens/s in dtype ``name``, each beside its roofline (``overrides``: engine
    settings other than their defaults)."""
    dtype = DTYPES[name]
    got = engine_numbers(model_dir, dtype, args, overrides)
    progress("_".join([f"engine_{name}", *(f"{k}_{v}" for k, v in (overrides or {}).items())]), got)
    bw, rates, fp32_rates = hw["bandwidth_gb_s"], hw["gemm_gflop_s"][name], hw["gemm_gflop_s"]["fp32"]
    shape = f"{arch['hidden_size']}x{arch['intermediate_size']}"
    decode = {}
    for batch, tok_s in got["decode_tok_s"].items():
        roof = decode_roofline_tok_s(params, dtype.itemsize, batch, bw, rates[f"decode_b{batch}_{shape}"])
        fp32_roof = decode_roofline_tok_s(params, 4, batch, bw, fp32_rates[f"decode_b{batch}_{shape}"])
        # the formula above reads the weights only; each step also reads every row's keys/values
        kv_bytes = batch * (args.decode_prompt + args.new_tokens // 2) * kv_bytes_per_token(arch, dtype.itemsize)
        with_kv = batch / max(batch / roof, (params["total"] * dtype.itemsize + kv_bytes) / (bw * 1e9))
        decode[f"b{batch}"] = {
            "tok_s": tok_s,
            "roofline_tok_s": roof,
            "fraction": tok_s / roof,
            "fraction_of_fp32_roofline": tok_s / fp32_roof,
            "roofline_with_kv_reads_tok_s": with_kv,
        }
    prefill_roof = rates[f"{args.gemm}^3"] * 1e9 / (2 * params["matmul"])
    prefill = {"tok_s": got["prefill_tok_s"], "roofline_tok_s": prefill_roof}
    return {"decode": decode, "prefill": {**prefill, "fraction": got["prefill_tok_s"] / prefill_roof}}


def trainer_section(model_dir: str, name: str, hw: dict[str, Any], params: dict[str, int], args: Any) -> dict[str, Any]:
    """Forward+backward tokens/s in ``name`` precision with and without checkpointing, and the CPU MFU."""
    big = f"{args.gemm}^3"
    out = {}
    for checkpointing in (False, True):
        tok_s = train_tok_s(model_dir, name, checkpointing, args)
        progress(f"trainer_{name}_ckpt={checkpointing}", tok_s)
        flops_per_token = (8 if checkpointing else 6) * params["matmul"]  # a recompute adds one forward
        roof = hw["gemm_gflop_s"][name][big] * 1e9 / flops_per_token
        out[f"{name}_{'ckpt' if checkpointing else 'nockpt'}"] = {
            "tok_s": tok_s,
            "roofline_tok_s": roof,
            "mfu": tok_s / roof,
            "fraction_of_fp32_roofline": tok_s / (hw["gemm_gflop_s"]["fp32"][big] * 1e9 / flops_per_token),
        }
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every measurement and its roofline fraction, as one JSON-ready dict."""
    torch.set_num_threads(args.threads)
    model_dir = args.model or _tiny_model(args)
    arch = json.loads((Path(model_dir) / "config.json").read_text())
    from transformers import AutoModelForCausalLM

    params = count_params(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32))
    hw = machine(arch, args)
    progress("machine", hw)
    profiles = []
    for batch in args.profile:
        profiles.append(profile_decode(model_dir, DTYPES[args.profile_dtype], batch, args))
        progress(f"profile_b{batch}", profiles[-1])
    hidden, inter = arch["hidden_size"], arch["intermediate_size"]
    dtypes = _dtypes_worth_running(hw, args)
    layers = int(arch["num_hidden_layers"])
    layouts = layout_rates(
        model_matmul_shapes(arch), layers, args.batches, {n: DTYPES[n] for n in dtypes}, args.repeats
    )
    progress("layouts", layouts)
    engine = {name: engine_section(model_dir, name, hw, params, arch, args) for name in dtypes}
    ratios = _side_by_side(model_dir, engine, hw, params, arch, args, dtypes)
    trainer: dict[str, Any] = {}
    for name in [] if args.skip_trainer else dtypes:
        trainer.update(trainer_section(model_dir, name, hw, params, args))
    return {
        f"profile_{args.profile_dtype}_decode": profiles,
        "machine": {
            **hw,
            "cpu_count": os.cpu_count(),
            "load_avg": os.getloadavg(),
            "openmp": wait_policy(os.environ),
            "processor": platform.processor() or platform.machine(),
            "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),  # ATEN_CPU_CAPABILITY caps it
        },
        "model": {"path": str(model_dir), "params": params, "hidden": hidden, "intermediate": inter},
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "layouts": layouts,
        "engine": engine,
        "trainer": trainer,
        "skipped": {name: hw["bf16_skip_reason"] for name in DTYPES if name not in dtypes},
        "bf16_over_fp32": bf16_ratios(engine, trainer, args.batches) if "bf16" in dtypes and trainer else None,
        **ratios,
    }


def _side_by_side(
    model_dir: str, engine: dict[str, Any], hw: Any, params: Any, arch: Any, args: Any, dtypes: list[str]
) -> dict[str, Any]:
    """The ``--compare-*`` engine forms, each run into ``engine`` beside the default, and their speed-ups."""
    weight_left = native_loop = own_matmul = None
    if args.compare_native_loop:  # the default engine (C++ decode loop where it runs) against the Python loop
        python_loop = {"native_kernels": "off"}
        engine["fp32_python_loop"] = engine_section(model_dir, "fp32", hw, params, arch, args, python_loop)
        native_loop = decode_ratios(engine, "fp32", "fp32_python_loop")
    if args.compare_own_matmul:  # the default engine against one multiplying with torch's matmul at every row count
        torch_matmul = {"own_matmul_rows": 0}
        engine["fp32_torch_matmul"] = engine_section(model_dir, "fp32", hw, params, arch, args, torch_matmul)
        own_matmul = decode_ratios(engine, "fp32", "fp32_torch_matmul")
    if args.compare_weight_left:  # the default engine against one multiplying x @ W.T at every row count
        linear = {"weight_left_rows": 0, "own_matmul_rows": 0}
        engine["fp32_linear"] = engine_section(model_dir, "fp32", hw, params, arch, args, linear)
        weight_left = decode_ratios(engine, "fp32", "fp32_linear")
    packed = None
    if args.compare_packed and "bf16" in dtypes:  # the default bf16 engine against one calling F.linear
        unpacked = {"pack_weights": False, "cpu_kernels": "torch"}
        engine["bf16_unpacked"] = engine_section(model_dir, "bf16", hw, params, arch, args, unpacked)
        packed = decode_ratios(engine, "bf16", "bf16_unpacked")
    torch_ops = None
    if args.compare_kernels and "bf16" in dtypes:  # the default bf16 engine against torch ops (oneDNN packed)
        engine["bf16_torch_ops"] = engine_section(model_dir, "bf16", hw, params, arch, args, {"cpu_kernels": "torch"})
        torch_ops = decode_ratios(engine, "bf16", "bf16_torch_ops")
    return {
        "fp32_default_over_linear": weight_left,
        "fp32_default_over_python_loop": native_loop,
        "fp32_default_over_torch_matmul": own_matmul,
        "bf16_default_over_unpacked": packed,
        "bf16_default_over_torch_ops": torch_ops,
    }


def _dtypes_worth_running(hw: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """fp32, and bf16 unless its GEMMs are slower than fp32's here (a CPU without bf16 units emulates them,
    tens of times slower: a bf16 SmolLM2 update would take hours); ``--bf16 always|never`` decides instead."""
    ratio = hw["bf16_over_fp32"][f"{args.gemm}^3"]
    slow = ratio < 1.0
    capability = torch.backends.cpu.get_cpu_capability()
    why = f"bf16 GEMM runs at {ratio:.3f}x fp32 on this CPU ({capability}); --bf16 always runs it anyway"
    hw["bf16_skip_reason"] = why if slow else "--bf16 never"
    run_bf16 = args.bf16 == "always" or (args.bf16 == "auto" and not slow)
    return ["fp32", "bf16"] if run_bf16 else ["fp32"]


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
    parser.add_argument("--profile", type=int, nargs="*", default=[], help="Profile decode at these batches.")
    parser.add_argument("--profile-dtype", choices=tuple(DTYPES), default="fp32", help="The profiled engine's dtype.")
    parser.add_argument("--skip-trainer", action="store_true", help="Engine and machine numbers only.")
    parser.add_argument("--compare-weight-left", action="store_true", help="Also run fp32 with F.linear throughout.")
    parser.add_argument("--compare-own-matmul", action="store_true", help="Also run fp32 on torch's matmul.")
    parser.add_argument("--compare-native-loop", action="store_true", help="Also run fp32 with native_kernels=off.")
    parser.add_argument("--kinds", nargs="+", choices=tuple(KIND_ENV), help="Run once per kind (roofline_kinds.py).")
    parser.add_argument("--rounds", type=int, default=1, help="With --kinds: rounds, kinds alternating.")
    parser.add_argument("--compare-packed", action="store_true", help="Also run bf16 on torch ops, pack_weights off.")
    parser.add_argument("--compare-kernels", action="store_true", help="Also run bf16 with cpu_kernels=torch.")
    parser.add_argument("--repeats", type=int, default=None, help="Timed repeats (best of; default 3, --quick 1).")
    parser.add_argument("--new-tokens", type=int, default=None, help="Decoded tokens per request (default 64).")
    parser.add_argument("--train-shape", type=int, nargs=2, default=None, help="Trainer batch and sequence length.")
    parser.add_argument("--out", default=None, help="Write the JSON here too.")
    args = parser.parse_args(argv)
    big = not args.quick
    args.copy_mb = 256 if big else 16
    args.gemm = args.gemm or (2048 if big else 128)
    args.repeats = args.repeats or (3 if big else 1)
    args.decode_prompt = 32 if big else 8
    args.new_tokens = args.new_tokens or (64 if big else 6)
    args.prefill_tokens = 512 if big else 32
    args.train_batch, args.train_seq = args.train_shape or ((2, 256) if big else (2, 32))
    return args


def main(argv: list[str] | None = None) -> None:
    """Run, print the JSON, and write it to ``--out`` when given."""
    args = parse_args(argv)
    report = run_kinds(sys.argv[1:] if argv is None else argv, args.kinds, args.rounds) if args.kinds else run(args)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
