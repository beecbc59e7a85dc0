"""Where the main job's memory goes, and what each memory option costs in time (JSON on stdout).

``step`` (default): one GSPO-token update on the single-turn main job's batch shape (B x G rows of prompt +
completion tokens) with SmolLM2-135M's architecture, side by side for the trainer's memory options. Each option
runs in its own subprocess, so its ``ru_maxrss`` is that option's honest peak; ``state_gb`` is the RSS after the
first update (model, gradients, AdamW state: what no option changes) and ``activations_gb`` the peak above it.

``job``: the real job (``agentrl train CONFIG`` for a few steps; the held-out evaluations only with ``--eval``) per
option set, with the peak RSS (GiB) of every phase (model load, rollout, update, weight sync, checkpoint, eval)
sampled by resetting the kernel's high-water mark (``/proc/self/clear_refs``) at each phase start. Each worker runs
on the allocator the agentrl command uses (TCMalloc where installed; ``allocator`` says which). Run it under
``flock /tmp/agentrl-heavy.lock``.

    python bench/bench_memory.py                                   # step options, random SmolLM2-shaped weights
    python bench/bench_memory.py job --config configs/quickstart_single.yaml --steps 3 \\
        --option 'before=!keep_engine_caches;!no_trim_heap' --option after= \\
        --option gc=trainer.gradient_checkpointing=true

A job option is ``NAME=override;override``; the pseudo-override ``!keep_engine_caches`` keeps the embedded
engine's KV buffers and prefix cache through the update (as before ``release_memory`` existed), and
``!no_trim_heap`` skips the loop's ``malloc_trim`` after the update (with both: the job before either change).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agentrl.util.allocator import loaded_allocator, use_preferred_allocator
from agentrl.util.openmp_env import short_spin_unless_chosen

sys.path.insert(0, str(Path(__file__).resolve().parent))

# name -> trainer settings; "baseline" is the single-turn main job as configured before this benchmark.
STEP_OPTIONS: dict[str, dict[str, Any]] = {
    "baseline": {"gradient_checkpointing": False, "micro_batch_tokens": 4096, "pack_shared_prompts": False},
    "micro_2048": {"gradient_checkpointing": False, "micro_batch_tokens": 2048, "pack_shared_prompts": False},
    "micro_1024": {"gradient_checkpointing": False, "micro_batch_tokens": 1024, "pack_shared_prompts": False},
    "checkpointing": {"gradient_checkpointing": True, "micro_batch_tokens": 4096, "pack_shared_prompts": False},
    "checkpointing_8192": {"gradient_checkpointing": True, "micro_batch_tokens": 8192, "pack_shared_prompts": False},
    "checkpointing_1024": {"gradient_checkpointing": True, "micro_batch_tokens": 1024, "pack_shared_prompts": False},
    # a group's rows forward its prompt once (trainer/shared_prefix.py); the rows share prompts by --group
    "shared_prefix": {"gradient_checkpointing": False, "micro_batch_tokens": 4096, "pack_shared_prompts": True},
    "shared_prefix_2048": {"gradient_checkpointing": False, "micro_batch_tokens": 2048, "pack_shared_prompts": True},
    "checkpointing_shared": {"gradient_checkpointing": True, "micro_batch_tokens": 4096, "pack_shared_prompts": True},
    "checkpointing_shared_2048": {
        "gradient_checkpointing": True,
        "micro_batch_tokens": 2048,
        "pack_shared_prompts": True,
    },
    # keeps as many layers' activations as 1536 tokens through the model hold (trainer/layer_checkpointing.py)
    "shared_keep_1536": {
        "gradient_checkpointing": True,
        "micro_batch_tokens": 2048,
        "pack_shared_prompts": True,
        "keep_activations_tokens": 1536,
    },
    # the same packed rows with SDPA over the whole row and its block mask (the default computes only the blocks)
    "checkpointing_shared_mask": {
        "gradient_checkpointing": True,
        "micro_batch_tokens": 4096,
        "pack_shared_prompts": True,
        "packed_attention": "mask",
    },
}


def rss_gb() -> float:
    """Current resident set size (GiB)."""
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 2**20


def hwm_gb() -> float:
    """Peak resident set size since the last ``reset_hwm`` (GiB)."""
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 2**20


def reset_hwm() -> None:
    """Restart the kernel's RSS high-water mark at the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def job_rows(batch: int, prompt: int, completion: int, group: int = 1) -> list[Any]:
    """``batch`` rows of ``prompt`` template tokens then ``completion`` sampled ones with +-1 advantages;
    each ``group`` consecutive rows share their prompt, as a GRPO group's samples do."""
    import torch

    from agentrl.trainer.batch import TrainRow

    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(batch):
        if i % group == 0:
            shared = torch.randint(0, 49152, (prompt,), generator=g).tolist()
        ids = shared + torch.randint(0, 49152, (completion,), generator=g).tolist()
        mask = [t >= prompt - 1 for t in range(len(ids) - 1)]
        adv = 1.0 if i % 2 == 0 else -1.0
        logp = [-3.0 if m else 0.0 for m in mask]
        rows.append(TrainRow([ids], logp, mask, [0 if m else -1 for m in mask], [adv if m else 0.0 for m in mask], i))
    return rows


def run_rows(run_dir: Path, step: int) -> tuple[list[Any], Any]:
    """The rows a real run trained at ``step`` (its archived trajectories) and its algorithm settings: equal work
    from the main job's own batch, not made-up rows."""
    from agentrl.job.loader import load_config
    from agentrl.rollout.archive import TrajectoryArchive
    from agentrl.trainer.batch import build_rows

    cfg = load_config(run_dir / "config.yaml", check_env=False)
    groups = [g.episodes for g in TrajectoryArchive(run_dir).load_groups() if g.step == step and g.state == "trained"]
    if not groups:
        raise SystemExit(f"{run_dir} archived no trained group of step {step}; pick a step its metrics.jsonl lists")
    return build_rows(groups, cfg.rollout.group_size, cfg.algorithm, current_version=step - 1), cfg.algorithm


def step_worker(option: str, args: argparse.Namespace) -> dict[str, Any]:
    """One option's update: warm-up (allocates gradients and AdamW state), then timed updates."""
    import torch
    from bench_trainer import _checkpointing, build_model

    from agentrl.algos.config import AlgorithmConfig
    from agentrl.config.sections import TrainerConfig
    from agentrl.trainer.batch import pack_micro_batches
    from agentrl.trainer.logprobs import PolicyLogprobs
    from agentrl.trainer.shared_prefix import pack_shared_prefix
    from agentrl.trainer.update import PolicyUpdater

    torch.set_num_threads(args.threads)
    settings = STEP_OPTIONS[option]
    lm = build_model(args.arch)
    if settings["gradient_checkpointing"]:
        _checkpointing(lm)
    lm.config.use_cache = False
    lm.train()
    cfg = TrainerConfig(lr=1e-6, mini_batches=1, precision=args.precision, **settings)
    if args.rows_from:
        rows, algo = run_rows(args.rows_from, args.rows_step)
    else:
        rows, algo = job_rows(args.batch, args.prompt, args.completion, args.group), AlgorithmConfig()
    updater = PolicyUpdater(PolicyLogprobs(lm, cfg.logprob_chunk_tokens), algo, cfg, temperature=0.7, total_steps=10)
    if cfg.pack_shared_prompts:
        micro = pack_shared_prefix(rows, cfg.micro_batch_tokens, cfg.pack_shared_prompts_max_len)
    else:
        micro = pack_micro_batches(rows, cfg.micro_batch_tokens)
    model_gb = rss_gb()
    updater.update(rows)
    state_gb = rss_gb()
    times, metrics = [], {}
    for _ in range(args.repeats):
        started = time.perf_counter()
        metrics = updater.update(rows)
        times.append(time.perf_counter() - started)
    # the kernel's per-thread RSS counters lag by a few pages, so the high-water mark can read just below an RSS
    # read earlier (seen under TCMalloc, which returns nothing to the system): the peak is at least every reading
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, state_gb, rss_gb())
    return {
        "option": option,
        **settings,
        "model_gb": model_gb,
        "state_gb": state_gb,
        "peak_gb": peak,
        "activations_gb": peak - state_gb,
        "rows": len(rows),
        "forward_tokens": sum(int(m.input_ids.numel()) for m in micro),  # padded, per forward pass
        "update_s": min(times),
        "update_s_all": times,
        "allocator": loaded_allocator(),
        "recomputed_layers": metrics.get("train/recomputed_layers"),  # per micro-batch, with keep_activations_tokens
    }


def run_steps(args: argparse.Namespace) -> dict[str, Any]:
    """Every step option in its own subprocess; ratios against the baseline."""
    results = {}
    for option in args.options.split(","):
        cmd = [sys.executable, __file__, "step", "--worker", option, "--batch", str(args.batch)]
        cmd += ["--prompt", str(args.prompt), "--completion", str(args.completion), "--repeats", str(args.repeats)]
        cmd += ["--arch", args.arch, "--threads", str(args.threads), "--group", str(args.group)]
        cmd += ["--precision", args.precision]
        if args.rows_from:
            cmd += ["--rows-from", str(args.rows_from), "--rows-step", str(args.rows_step)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results[option] = json.loads(out.stdout.strip().splitlines()[-1])
    base = results.get("baseline")
    if base is not None:
        for result in results.values():
            result["peak_vs_baseline"] = result["peak_gb"] / base["peak_gb"]
            result["time_vs_baseline"] = result["update_s"] / base["update_s"]
    shape = f"{args.batch} rows x ({args.prompt} prompt + {args.completion} completion) tokens, groups of {args.group}"
    if args.rows_from:
        shape = f"step {args.rows_step} of {args.rows_from} (its trained groups, its algorithm settings)"
    model = {"smollm2": "SmolLM2-135M's architecture", "small": "4 narrow layers, SmolLM2's vocabulary"}[args.arch]
    return {"shape": shape, "model": f"{model}, random weights, fp32", "precision": args.precision, "options": results}


KEEP_ENGINE_CACHES = "!keep_engine_caches"  # job option pseudo-override: skip the release before the update
NO_TRIM_HEAP = "!no_trim_heap"  # job option pseudo-override: skip the loop's malloc_trim after the update


def _undo_memory_changes(loop: Any, overrides: list[str]) -> list[str]:
    """Apply the pseudo-overrides (the job before the memory changes) to the loop; the real overrides."""
    if KEEP_ENGINE_CACHES in overrides:  # the "before" of the engine-release change: keep caches through the update

        async def keep(engine: Any) -> None:
            return None

        loop._release_engine_memory = keep
    if NO_TRIM_HEAP in overrides:  # with the one above: the job as it was before either memory change
        loop.trim_heap = lambda: False
    return [o for o in overrides if o not in (KEEP_ENGINE_CACHES, NO_TRIM_HEAP)]


def _watched(phases: list[dict[str, Any]], name: str, fn: Any, is_async: bool) -> Any:
    """``fn`` with its peak RSS (from a high-water mark reset at its start) and duration appended to ``phases``."""

    def record(started: float, before: float) -> None:
        phases.append({"phase": name, "rss_before_gb": before, "peak_gb": hwm_gb(), "s": time.perf_counter() - started})

    async def run_async(*a: Any, **k: Any) -> Any:
        reset_hwm()
        started, before = time.perf_counter(), rss_gb()
        try:
            return await fn(*a, **k)
        finally:
            record(started, before)

    def run_sync(*a: Any, **k: Any) -> Any:
        reset_hwm()
        started, before = time.perf_counter(), rss_gb()
        try:
            return fn(*a, **k)
        finally:
            record(started, before)

    return run_async if is_async else run_sync


def job_worker(config: str, overrides: list[str], run_root: Path, with_eval: bool = False) -> dict[str, Any]:
    """``agentrl train`` with each phase's peak RSS recorded (the phases are wrapped, nothing else changes)."""
    import agentrl.trainer.loop as loop
    import agentrl.trainer.step_end as step_end
    from agentrl.job.loader import load_config
    from agentrl.rollout.orchestrator import RolloutOrchestrator
    from agentrl.trainer.update import PolicyUpdater

    phases: list[dict[str, Any]] = []
    overrides = _undo_memory_changes(loop, overrides)
    watched = functools.partial(_watched, phases)
    loop.build_session = watched("load", loop.build_session, True)
    step_end.sync_weights = watched("sync", step_end.sync_weights, True)
    step_end.save_session = watched("checkpoint", step_end.save_session, False)
    RolloutOrchestrator.collect_step = watched("rollout", RolloutOrchestrator.collect_step, True)
    PolicyUpdater.update = watched("update", PolicyUpdater.update, False)
    if with_eval:
        loop.heldout_eval = watched("eval", loop.heldout_eval, True)
    quiet = ["logging.progress=false", "logging.wandb_mode=disabled", f"logging.run_root={run_root}"]
    quiet += [] if with_eval else ["eval.splits=[]"]
    cfg = load_config(config, [*overrides, *quiet])
    started = time.perf_counter()
    run_dir = loop.train(cfg, config_name="bench_memory")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["perf/step_s"] for r in records if "perf/step_s" in r]  # evaluation records have no step time
    return {
        "overrides": overrides,
        "wall_s": time.perf_counter() - started,
        "step_s": steps,
        # ru_maxrss forgets what came before a high-water-mark reset: the job's peak is its largest phase peak
        "peak_gb": max([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20] + [x["peak_gb"] for x in phases]),
        "phase_peak_gb": {
            p: max(x["peak_gb"] for x in phases if x["phase"] == p) for p in {x["phase"] for x in phases}
        },
        "phases": phases,
        "allocator": loaded_allocator(),
    }


def run_jobs(args: argparse.Namespace) -> dict[str, Any]:
    """Every job option (``NAME=override;override``) in its own subprocess, in the order given."""
    results = {}
    for spec in args.option or ["baseline="]:
        name, _, joined = spec.partition("=")
        overrides = [o for o in joined.split(";") if o] + [f"trainer.steps={args.steps}", *args.override]
        cmd = [
            sys.executable,
            __file__,
            "job",
            "--worker",
            name,
            "--config",
            args.config,
            "--run-root",
            str(args.run_root),
            *(["--eval"] if args.eval else []),
        ]
        cmd += [arg for o in overrides for arg in ("-o", o)]
        env = dict(os.environ)
        env.update(short_spin_unless_chosen(env))  # the agentrl command's
        out = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if out.returncode != 0:
            raise RuntimeError(f"job option {name} failed:\n{out.stderr[-3000:]}")
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"[bench_memory] {name}: peak {results[name]['peak_gb']:.2f} GB", file=sys.stderr, flush=True)
    return {"config": args.config, "steps": args.steps, "options": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", default="step", choices=["step", "job"])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--options", default=",".join(STEP_OPTIONS), help="step: which options, comma-separated.")
    parser.add_argument("--batch", type=int, default=24, help="step: rows (main job: 6 prompts x 4 samples).")
    parser.add_argument("--prompt", type=int, default=200, help="step: prompt tokens per row.")
    parser.add_argument("--completion", type=int, default=160, help="step: completion tokens per row.")
    parser.add_argument("--group", type=int, default=4, help="step: consecutive rows sharing a prompt.")
    parser.add_argument("--repeats", type=int, default=2, help="step: timed updates after the warm-up.")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--precision", default="float32", choices=["float32", "bfloat16_autocast"], help="step: the update's precision."
    )
    parser.add_argument("--arch", choices=["smollm2", "small"], default="smollm2", help="step: model shape.")
    parser.add_argument("--rows-from", type=Path, help="step: a run directory whose archived batch to update on.")
    parser.add_argument("--rows-step", type=int, default=1, help="step: which of --rows-from's steps.")
    parser.add_argument("--config", default="configs/quickstart_single.yaml", help="job: the run config.")
    parser.add_argument("--steps", type=int, default=3, help="job: training steps per option.")
    parser.add_argument("--option", action="append", help="job: NAME=override;override (repeat; in order).")
    parser.add_argument("-o", "--override", action="append", default=[], help="job: override for every option.")
    parser.add_argument("--eval", action="store_true", help="job: keep the config's held-out evaluations (phase eval).")
    parser.add_argument("--run-root", type=Path, default=Path("runs/bench_memory"), help="job: run directories.")
    args = parser.parse_args()
    if args.worker:  # measure under the allocator the agentrl command runs on (TCMalloc where installed)
        use_preferred_allocator()
    if args.worker and args.mode == "step":
        print(json.dumps(step_worker(args.worker, args)))
    elif args.worker:
        print(json.dumps(job_worker(args.config, args.override, args.run_root, with_eval=args.eval)))
    else:
        print(json.dumps(run_steps(args) if args.mode == "step" else run_jobs(args), indent=1))


if __name__ == "__main__":
    main()
