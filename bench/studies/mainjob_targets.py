"""The main job's learning targets, judged on run directories of ``agentrl train`` (``heldout_report.py`` prints them).

1. A curve that rises: per run, training success averaged over the last quarter of steps minus the first quarter's
   (at least one step each), at least ``RISE`` in every run.
2. A held-out verdict beyond noise: per run, the paired change of pass@1 on the target split with its 95 % interval
   over tasks lying above 0, in every run.
3. A multi-turn skill: the episodes that had a failed run (code that raised or failed a visible example) and still
   ended in success, as a fraction of the split's tasks, after minus before; pooled over runs: per task the mean
   change over runs, then a 95 % t-interval over tasks (the task is the unit: runs share the tasks). The interval
   must lie above 0. The per-run recovery rate among episodes with a failed run is printed beside it.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentrl.util.stats import t_interval  # noqa: E402

RISE = 0.15


def success_per_step(records: list[dict[str, Any]]) -> list[float]:
    """Training success per step from ``metrics.jsonl`` records: over every group completed in the step
    (``rollout/success_rate``: dynamic sampling's filtered groups too), else over the trained batch (runs before
    2026-12-07 logged only ``episode/success_rate``, the same number without dynamic sampling)."""
    out = []
    for record in records:
        value = record.get("rollout/success_rate", record.get("episode/success_rate"))
        if value is not None and "episode/success_rate" in record:
            out.append(value)
    return out


def quarter_rise(success_per_step: list[float]) -> dict[str, Any]:
    """First-quarter and last-quarter means of training success (at least one step each) and their difference."""
    n = len(success_per_step)
    if n < 2:
        return {"steps": n, "first": None, "last": None, "rise": None, "met": False}
    k = max(1, n // 4)
    first, last = statistics.fmean(success_per_step[:k]), statistics.fmean(success_per_step[-k:])
    return {"steps": n, "quarter": k, "first": first, "last": last, "rise": last - first, "met": last - first >= RISE}


def _recovered_per_task(path: Path) -> dict[str, float] | None:
    """Per task: the fraction of its episodes that had a failed run and ended in success (None: an evaluation
    written before the per-task failed-run flags existed)."""
    tasks = json.loads(path.read_text(encoding="utf-8"))["tasks"]
    if any(len(t.get("failed_runs") or []) != len(t["successes"]) for t in tasks):
        return None
    return {
        t["task_id"]: statistics.fmean(f and s for f, s in zip(t["failed_runs"], t["successes"]))
        for t in tasks
        if t["successes"]
    }


def pooled_recovery(run_dirs: list[Path], split: str) -> dict[str, Any]:
    """Recovered-after-a-failed-run per task, after minus before, averaged over runs per task, t-interval over tasks."""
    per_task: dict[str, list[float]] = {}
    before_rates, after_rates = [], []
    for run_dir in run_dirs:
        before = _recovered_per_task(run_dir / f"eval-before-{split}.json")
        after = _recovered_per_task(run_dir / f"eval-after-{split}.json")
        if before is None or after is None:
            return {"change": t_interval([]), "met": False, "missing": f"{run_dir} has no per-task failed-run flags"}
        shared = [task for task in after if task in before]
        before_rates.append(statistics.fmean(before[t] for t in shared))
        after_rates.append(statistics.fmean(after[t] for t in shared))
        for task in shared:
            per_task.setdefault(task, []).append(after[task] - before[task])
    change = t_interval([statistics.fmean(changes) for changes in per_task.values()])
    return {
        "change": change,
        "before": statistics.fmean(before_rates),
        "after": statistics.fmean(after_rates),
        "met": change["lo"] is not None and change["lo"] > 0,
    }


def targets(runs: list[dict[str, Any]], run_dirs: list[Path], split: str) -> dict[str, Any]:
    """The three targets over the runs (``runs``: ``heldout_report.run_summary`` of each of ``run_dirs``)."""
    curve = [quarter_rise(r["success_per_step"]) for r in runs]
    gains = [r["splits"][split]["gain"] if split in r["splits"] else None for r in runs]
    rose = [g is not None and g.get("lo") is not None and g["lo"] > 0 for g in gains]
    recovery = [r["splits"][split]["behaviour"]["recovery_frac"] if split in r["splits"] else None for r in runs]
    evaluated = all(split in r["splits"] for r in runs)
    pooled = pooled_recovery(run_dirs, split) if evaluated else {"missing": f"the split {split!r} was not evaluated"}
    return {
        "split": split,
        "curve": {"per_run": curve, "met": all(c["met"] for c in curve)},
        "heldout": {"per_run": gains, "rose": rose, "met": all(rose)},
        "recovery": {"per_run_rate": recovery, "pooled": {"met": False, **pooled}},
    }


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2f}"


def _interval(change: dict[str, Any]) -> str:
    if change.get("mean") is None:
        return "n/a"
    if change.get("lo") is None:
        return f"{change['mean']:+.2f} (no interval)"
    return f"{change['mean']:+.2f} [{change['lo']:+.2f}, {change['hi']:+.2f}]"


def targets_text(goals: dict[str, Any]) -> str:
    """The targets as lines: each run's number, then 'met' or 'NOT met'."""
    met = {True: "met", False: "NOT met"}
    split = goals["split"]
    lines = [f"Targets (held-out split {split}):"]
    curve = goals["curve"]
    parts = [
        f"{c['first']:.2f} -> {c['last']:.2f} ({_num(c['rise'])})" if c["rise"] is not None else "n/a"
        for c in curve["per_run"]
    ]
    lines.append(
        f"1. training success, first vs last quarter of steps, per run: {'; '.join(parts)}; "
        f">= +{RISE:.2f} in every run: {met[curve['met']]}"
    )
    held = goals["heldout"]
    parts = [_interval(g) if g else "n/a" for g in held["per_run"]]
    lines.append(
        f"2. {split} paired change [95 % over tasks], per run: {'; '.join(parts)}; interval above 0 in "
        f"{sum(held['rose'])} of {len(held['rose'])} runs: {met[held['met']]}"
    )
    rec = goals["recovery"]
    pooled = rec["pooled"]
    rates = ", ".join("n/a" if r is None else f"{r[0]:.2f} -> {r[1]:.2f}" for r in rec["per_run_rate"])
    if pooled.get("missing"):
        pooled_text = f"n/a ({pooled['missing']})"
    else:
        pooled_text = (
            f"{pooled['before']:.2f} -> {pooled['after']:.2f} of tasks, change {_interval(pooled['change'])} "
            f"(pooled over runs, interval over tasks)"
        )
    lines.append(
        f"3. {split} recovered after a failed run (of episodes with one), per run: {rates}; episodes that failed a "
        f"run and then succeeded: {pooled_text}: interval above 0: {met[pooled['met']]}"
    )
    return "\n".join(lines)
