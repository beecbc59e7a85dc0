"""Sync vs async training, side by side in one run (one JSON object on stdout).

Runs ``agentrl train CONFIG`` twice for the same number of steps, once per ``trainer.mode``, each in
its own process with its own thread setting (``--threads-sync`` / ``--threads-async``; unset: the
mode's default, every core for sync, half the cores for async). Reports the training-loop wall time
(sum of ``perf/step_s``: rollouts, update, sync, commit and checkpoint of every step), the ratio
async/sync (target <= 0.7), the overlap and staleness statistics, and, with ``--eval-tasks N``, the
held-out pass@1 after training of both modes on the same tasks (paired evaluation).

    flock /tmp/agentrl-heavy.lock .venv/bin/python bench/bench_async.py configs/quickstart.yaml --steps 3

With SmolLM2-135M on 2 CPU cores that is about 10 minutes (model loads, 3 steps per mode of 60-100 s).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_mode(args: argparse.Namespace, mode: str, root: Path) -> dict[str, Any]:
    """One training run in ``mode``; its loop time, staleness statistics and held-out results."""
    threads = args.threads_sync if mode == "sync" else args.threads_async
    overrides = [
        f"trainer.mode={mode}",
        f"trainer.steps={args.steps}",
        "trainer.checkpoint_every_steps=100000",  # the final checkpoint only, equal in both modes
        f"logging.run_root={root}",
        f"logging.run_name={mode}",
        "logging.wandb_mode=disabled",
        "logging.progress=false",
        *([f"trainer.threads={threads}"] if threads else []),
        *(
            [f"eval.max_tasks={args.eval_tasks}", "eval.samples=1"]
            if args.eval_tasks
            else ["eval.splits=[]"]  # no held-out evaluation: time the training only
        ),
        *args.overrides,
    ]
    cmd = [sys.executable, "-m", "agentrl.cli.main", "train", args.config, *overrides]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{mode} run failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return summarize(root / mode, wall)


def summarize(run_dir: Path, process_wall: float) -> dict[str, Any]:
    """Loop time and per-step statistics from the run's metrics.jsonl (and its eval files)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in records if "perf/step_s" in r]
    out: dict[str, Any] = {
        "steps": len(steps),
        "loop_wall_s": round(sum(r["perf/step_s"] for r in steps), 2),
        "process_wall_s": round(process_wall, 2),
        "step_s": [round(r["perf/step_s"], 2) for r in steps],
        "update_s_mean": _mean(steps, "train/time_s"),
        "overlap_s_total": round(sum(r.get("perf/overlap_s", 0.0) for r in steps), 2),
        "clip_frac_seq_mean": _mean(steps, "train/clip_frac_seq"),
        "token_lag_mean": _mean(steps, "train/token_lag_mean"),
        "token_lag_max": max((r.get("train/token_lag_max", 0.0) for r in steps), default=0.0),
        "stale_dropped_frac_mean": _mean(steps, "async/stale_dropped_frac"),
        "stale_discarded_tokens": sum(r.get("rollout/stale_discarded_tokens", 0.0) for r in steps),
        "reward_mean": [round(r.get("episode/reward_mean", 0.0), 3) for r in steps],
    }
    evals = [r for r in records if any(k.endswith("/pass@1") for k in r)]
    if evals:
        out["pass@1"] = {k: v for r in evals for k, v in r.items() if k.endswith("/pass@1")}
    return out


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return round(sum(values) / len(values), 4) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="the run config to train (e.g. configs/quickstart.yaml)")
    parser.add_argument("overrides", nargs="*", help="extra dotted overrides for both modes")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads-sync", type=int, default=None, help="trainer.threads in sync mode")
    parser.add_argument("--threads-async", type=int, default=None, help="trainer.threads in async mode")
    parser.add_argument("--eval-tasks", type=int, default=0, help="held-out tasks per split after training (0: none)")
    args = parser.parse_intermixed_args()
    with tempfile.TemporaryDirectory(prefix="bench_async_") as tmp:
        results = {mode: run_mode(args, mode, Path(tmp)) for mode in ("sync", "async")}
    ratio = results["async"]["loop_wall_s"] / max(results["sync"]["loop_wall_s"], 1e-9)
    print(
        json.dumps(
            {
                "config": args.config,
                "steps": args.steps,
                "overrides": args.overrides,
                **results,
                "async_over_sync_loop_wall": round(ratio, 3),
                "target_met": ratio <= 0.7,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
