"""Measured jobs of the learning benchmarks (``compare_trl.py``, ``bench_learning.py``): an agentrl training run
and a held-out evaluation of a model directory, each in its own subprocess so that its peak RSS is its own.

A worker writes one JSON result file; ``run_worker`` starts it, keeps its log, and raises with the log's
tail when it fails. The held-out evaluation is agentrl's paired evaluator (``agentrl.trainer.heldout``:
the same sampling seeds for every model evaluated under the same ``trainer.seed``), on a fresh embedded
engine loaded from the model directory, so every model (base, agentrl's, TRL's) is evaluated the same way.

    python bench/studies/learning_runs.py train CONFIG --run-dir DIR --result FILE [--then-heldout] [-o key=value ...]
    python bench/studies/learning_runs.py heldout CONFIG --model DIR --phase before --out-dir DIR --result FILE
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agentrl.util.openmp_env import short_spin_unless_chosen

QUIET = ["logging.progress=false", "logging.wandb_mode=disabled"]


def peak_rss_gb() -> float:
    """Peak resident set size of this process and of its waited-for children (the larger), in GiB."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) / 2**20  # Linux reports KiB


def worker_env() -> dict[str, str]:
    """The environment of a worker: the agentrl command's OpenMP wait policy and quiet tokenizers."""
    env = dict(os.environ)
    env.update(short_spin_unless_chosen(env))
    return {
        **env,
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    }


def run_worker(argv: list[str], log_path: Path) -> dict[str, Any]:
    """Run ``python ARGV --result FILE`` with its output in ``log_path``; returns the result (plus its wall time)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result_path = log_path.with_suffix(".result.json")
    result_path.unlink(missing_ok=True)
    started = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        code = subprocess.run(
            [sys.executable, *argv, "--result", str(result_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=worker_env(),
        ).returncode
    if code != 0 or not result_path.is_file():
        tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-25:])
        raise RuntimeError(f"worker {' '.join(argv[:2])} failed (exit {code}); the end of {log_path}:\n{tail}")
    result = json.loads(result_path.read_text())
    result["process_wall_s"] = time.perf_counter() - started
    return result


def trained_lengths(run_dir: Path) -> list[dict[str, Any]]:
    """Every trained episode of a run (from its trajectory archive): step, dataset position, tokens, reward."""
    from agentrl.rollout.archive import TrajectoryArchive

    rows = []
    for group in TrajectoryArchive(run_dir).load_groups():
        if group.state != "trained":
            continue
        for episode in group.episodes:
            rows.append(
                {
                    "step": group.step,
                    "seq": group.seq,
                    "task_id": group.task_id,
                    "tokens": sum(s.num_sampled for s in episode.segments),
                    "reward": float(episode.final_reward or 0.0),
                    "resumed": episode.resumed,
                }
            )
    return rows


def train_job(config: str, overrides: list[str], run_dir: Path) -> dict[str, Any]:
    """``agentrl train CONFIG`` (no in-job evaluation) into ``run_dir``; step times, rewards and trained lengths.

    ``peak_rss_gb`` is taken when training ends, before any evaluation the same worker may run next.
    """
    from agentrl.job.loader import load_config
    from agentrl.trainer.checkpoint import latest_checkpoint
    from agentrl.trainer.loop import train
    from agentrl.trainer.reporting import read_metrics

    location = [f"logging.run_root={run_dir.parent}", f"logging.run_name={run_dir.name}"]
    cfg = load_config(config, [*overrides, *QUIET, *location, "eval.splits=[]"])
    started = time.perf_counter()
    train(cfg, config_name=Path(config).stem)
    wall = time.perf_counter() - started
    history = read_metrics(run_dir)
    checkpoint = latest_checkpoint(run_dir)
    return {
        "side": "agentrl",
        "run_dir": str(run_dir),
        "model_dir": str(checkpoint.model_dir) if checkpoint else None,
        "step_s": [h["perf/step_s"] for h in history],
        "train_wall_s": wall,
        "reward_per_step": [h.get("rollout/reward_mean", 0.0) for h in history],
        "success_per_step": [h.get("episode/success_rate", 0.0) for h in history],
        "trained": trained_lengths(run_dir),
        "peak_rss_gb": peak_rss_gb(),
    }


async def heldout_job(config: str, overrides: list[str], model_dir: str, phase: str, out_dir: Path) -> dict[str, Any]:
    """Held-out pass@1 (and per-task successes) of ``model_dir`` on every ``eval.splits`` split, on a fresh engine."""
    from agentrl.job.loader import load_config
    from agentrl.job.stack import build_engine, load_run_tokenizer
    from agentrl.trainer.heldout import heldout_eval

    cfg = load_config(config, [*overrides, *QUIET, f"model.path={model_dir}"])
    engine = build_engine(cfg)
    try:
        metrics = await heldout_eval(cfg, engine, load_run_tokenizer(cfg), out_dir, phase)
    finally:
        await engine.close()
    splits: dict[str, Any] = {}
    for split in cfg.eval.splits:
        report = json.loads((out_dir / f"eval-{phase}-{split}.json").read_text())
        splits[split] = {
            "pass@1": metrics[f"eval/{split}/pass@1"],
            "successes": {t["task_id"]: [bool(s) for s in t["successes"]] for t in report["tasks"]},
        }
    return {"phase": phase, "model_dir": model_dir, "splits": splits, "peak_rss_gb": peak_rss_gb()}


def main() -> None:
    """Worker entry point: ``train`` or ``heldout`` (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job", choices=["train", "heldout"])
    parser.add_argument("config")
    parser.add_argument("-o", "--override", action="append", default=[], help="A dotted config override (repeat).")
    parser.add_argument("--run-dir", type=Path, help="train: the run directory to create.")
    parser.add_argument("--model", help="heldout: the model directory to evaluate.")
    parser.add_argument("--phase", default="after", help="heldout: the name in eval-<phase>-<split>.json.")
    parser.add_argument("--out-dir", type=Path, help="heldout: where the evaluation reports go.")
    parser.add_argument("--then-heldout", action="store_true", help="train: then evaluate the final model (after).")
    parser.add_argument("--result", type=Path, required=True, help="Where the worker writes its JSON result.")
    args = parser.parse_args()
    if args.job == "train":
        result = train_job(args.config, args.override, args.run_dir)
        if args.then_heldout and result["model_dir"]:  # one process for both: saves a start-up per run
            result["after"] = asyncio.run(
                heldout_job(args.config, args.override, result["model_dir"], "after", args.run_dir)
            )
    else:
        result = asyncio.run(heldout_job(args.config, args.override, args.model, args.phase, args.out_dir))
    args.result.write_text(json.dumps(result))


def train_argv(config: str, overrides: list[str], run_dir: Path, then_heldout: bool = False) -> list[str]:
    """Arguments of ``run_worker`` for a training job (``then_heldout``: and the held-out evaluation after it)."""
    extra = ["--then-heldout"] if then_heldout else []
    return [__file__, "train", config, "--run-dir", str(run_dir), *extra, *_overrides(overrides)]


def heldout_argv(config: str, overrides: list[str], model_dir: str, phase: str, out_dir: Path) -> list[str]:
    """Arguments of ``run_worker`` for a held-out evaluation of ``model_dir``."""
    return [__file__, "heldout", config, "--model", model_dir, "--phase", phase, "--out-dir", str(out_dir)] + (
        _overrides(overrides)
    )


def _overrides(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("-o", item)]


if __name__ == "__main__":
    main()
