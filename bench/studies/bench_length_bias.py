"""Length bias of partial rollouts (JSON on stdout): the trained completion lengths and rollout step times of
synchronous collection vs partial rollouts with over-sampling, under ``rollout.batch_order`` finish and start,
on the same tasks, env and engine.

The policy does not change: after every step the engine takes the same weights as a new version, so carried
episodes age and the staleness bound acts as in training, but every mode samples from one distribution.
Synchronous collection trains every sampled episode, so its lengths are the reference; a partial mode whose
trained lengths are shorter selects short answers. The modes draw the same task sequence (same dataset seed)
and alternate step by step on one engine, so a shared machine's load drift hits them alike. Confidence
intervals: percentile bootstrap over trained groups (a group's episodes share a task, so groups are the units).

    python bench/studies/bench_length_bias.py --config configs/quickstart_single.yaml --steps 12 --out bias.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

MODES: dict[str, dict[str, Any]] = {
    "sync": {"partial_rollout": False},
    "partial_finish": {"partial_rollout": True, "batch_order": "finish"},
    "partial_start": {"partial_rollout": True, "batch_order": "start"},
    # twice the groups in flight: each step trains the groups started one step earlier (a one-step pipeline)
    "partial_start_2x": {"partial_rollout": True, "batch_order": "start", "over_sample": 2.0},
}


def bootstrap_mean_ci(groups: list[list[int]], reps: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean episode length, resampling whole groups."""
    rng = random.Random(seed)
    means = []
    for _ in range(reps):
        draw = [x for _ in groups for x in rng.choice(groups)]
        means.append(sum(draw) / len(draw))
    means.sort()
    return means[int(0.025 * reps)], means[int(0.975 * reps) - 1]


def bootstrap_diff_ci(a: list[list[int]], b: list[list[int]], reps: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of mean(a) - mean(b), groups resampled independently in each."""
    rng = random.Random(seed)
    diffs = []
    for _ in range(reps):
        da = [x for _ in a for x in rng.choice(a)]
        db = [x for _ in b for x in rng.choice(b)]
        diffs.append(sum(da) / len(da) - sum(db) / len(db))
    diffs.sort()
    return diffs[int(0.025 * reps)], diffs[int(0.975 * reps) - 1]


def quantiles(values: list[int]) -> dict[str, float]:
    """p10 / p25 / p50 / p75 / p90 of the trained lengths."""
    cuts = statistics.quantiles(values, n=20, method="inclusive") if len(values) > 1 else [float(values[0])] * 19
    return {"p10": cuts[1], "p25": cuts[4], "p50": cuts[9], "p75": cuts[14], "p90": cuts[17]}


def mode_summary(record: dict[str, Any], max_new: int) -> dict[str, Any]:
    """Lengths, rewards, times and discarded work of one mode."""
    groups = record["groups"]
    flat = [x for g in groups for x in g]
    return {
        "step_s": [round(t, 3) for t in record["step_s"]],
        "mean_step_s": statistics.fmean(record["step_s"]),
        "groups_trained": len(groups),
        "episodes_trained": len(flat),
        "mean_tokens": statistics.fmean(flat),
        "mean_tokens_ci95": bootstrap_mean_ci(groups),
        "quantiles": quantiles(flat),
        "frac_at_max_new_tokens": sum(x >= max_new for x in flat) / len(flat),
        "mean_reward": statistics.fmean(record["rewards"]),
        "episodes_restarted": record["restarted"],
        "stale_discarded_tokens": record["discarded"],
        "resumed_episodes_trained": record["resumed"],
    }


async def measure(cfg: Any, steps: int, modes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Collect ``steps`` batches per mode, modes alternating on one engine; raw lengths and times per mode."""
    from agentrl.job.stack import build_engine, env_factory_for, load_run_tokenizer
    from agentrl.rollout.dataset import TaskDataset
    from agentrl.rollout.orchestrator import RolloutOrchestrator

    tokenizer = load_run_tokenizer(cfg)
    engine = build_engine(cfg)
    factory = env_factory_for(cfg)
    orchs = {}
    for name, update in modes.items():
        probe = factory()
        dataset = TaskDataset.from_env(probe, seed=cfg.rollout.seed)
        probe.close()
        rollout = cfg.rollout.model_copy(update=update)
        orchs[name] = RolloutOrchestrator(engine, factory, tokenizer, rollout, dataset=dataset, buffer=None)
    keys = ("groups", "step_s", "rewards")
    raw: dict[str, dict[str, Any]] = {
        m: {**{k: [] for k in keys}, "restarted": 0, "discarded": 0, "resumed": 0} for m in modes
    }
    weights = dict(engine.runner.model.state_dict())  # the same weights as a new version: episodes age, none change
    try:
        for step in range(1, steps + 1):
            for name, orch in orchs.items():
                started = time.perf_counter()
                batch = await orch.collect_step(step)
                rec = raw[name]
                rec["step_s"].append(time.perf_counter() - started)
                rec["groups"] += [[e.segment.num_sampled for e in g] for g in batch.groups]
                rec["rewards"] += [float(e.final_reward or 0.0) for g in batch.groups for e in g]
                rec["resumed"] += sum(e.resumed > 0 for g in batch.groups for e in g)
                rec["restarted"] += int(batch.metrics.get("rollout/episodes_restarted", 0))
                rec["discarded"] += int(batch.metrics.get("rollout/stale_discarded_tokens", 0))
            await engine.update_weights(weights, version=step)
            print(f"[bias] step {step}/{steps} done", file=sys.stderr, flush=True)
    finally:
        for orch in orchs.values():
            await orch.close()
        await engine.close()
    return raw


def report(cfg: Any, raw: dict[str, dict[str, Any]], steps: int) -> dict[str, Any]:
    """Per-mode summaries plus each partial mode's length shift and step-time ratio against sync."""
    max_new = cfg.rollout.max_new_tokens
    out: dict[str, Any] = {"steps": steps, "rollout": cfg.rollout.model_dump(mode="json"), "modes": {}}
    for name, record in raw.items():
        out["modes"][name] = mode_summary(record, max_new)
    sync = out["modes"].get("sync")
    if sync is not None:
        for name, summary in out["modes"].items():
            if name == "sync":
                continue
            summary["mean_tokens_minus_sync"] = summary["mean_tokens"] - sync["mean_tokens"]
            summary["mean_tokens_minus_sync_ci95"] = bootstrap_diff_ci(raw[name]["groups"], raw["sync"]["groups"])
            summary["step_time_vs_sync"] = summary["mean_step_s"] / sync["mean_step_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/quickstart_single.yaml", help="Run config (model, engine, env).")
    parser.add_argument("-o", "--override", action="append", default=[], help="Dotted config override (repeat).")
    parser.add_argument("--steps", type=int, default=12, help="Steps collected per mode.")
    parser.add_argument("--modes", default="sync,partial_finish,partial_start", help=f"Which of {list(MODES)} to run.")
    parser.add_argument("--out", type=Path, default=None, help="Also write the JSON here.")
    args = parser.parse_args()
    from agentrl.job.loader import load_config

    cfg = load_config(args.config, args.override)
    modes = {name: MODES[name] for name in args.modes.split(",")}
    raw = asyncio.run(measure(cfg, args.steps, modes))
    result = report(cfg, raw, args.steps)
    text = json.dumps(result, indent=1)
    if args.out is not None:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
