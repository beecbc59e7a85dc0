"""Statistics and the plot of ``bench_learning.py``: held-out pass@1 with confidence intervals over seeds,
paired differences against the baseline, evaluation noise, wall time, rewards and trained lengths.

Intervals are Student-t intervals over seeds (mean +- t_{0.975, n-1} s / sqrt(n)). With 5 seeds a bootstrap
over seeds has only 126 distinct resamples and its percentile interval is known to be too narrow (it under-
covers at small n); the t-interval is the standard small-sample choice and is exact for normal errors. The
comparison against the baseline is paired: a seed fixes the task order, the sampling seeds of training and
the sampling seeds of the held-out evaluation, so the per-seed difference cancels what the seed shares.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from agentrl.util.stats import t_interval


def pooled_pass(splits: dict[str, Any]) -> float:
    """pass@1 over every task of every evaluated split (each task weighs the same)."""
    per_task = [sum(s) / len(s) for split in splits.values() for s in split["successes"].values() if s]
    return statistics.fmean(per_task) if per_task else 0.0


def eval_sampling_se(splits: dict[str, Any]) -> float:
    """Standard error of the pooled pass@1 from sampling alone (the task set fixed, k samples per task)."""
    terms, tasks = 0.0, 0
    for split in splits.values():
        for samples in split["successes"].values():
            k = len(samples)
            p = sum(samples) / k
            terms += p * (1 - p) / max(k - 1, 1)
            tasks += 1
    return math.sqrt(terms) / max(tasks, 1)


def _metric_by_seed(runs: list[dict[str, Any]], split: str | None) -> dict[int, float]:
    """{seed: after - before} of one split (None: every split pooled)."""
    out = {}
    for run in runs:
        after, before = run["after"], run["before"]
        if split is None:
            out[run["seed"]] = pooled_pass(after) - pooled_pass(before)
        else:
            out[run["seed"]] = after[split]["pass@1"] - before[split]["pass@1"]
    return out


def variant_summary(runs: list[dict[str, Any]], baseline: list[dict[str, Any]]) -> dict[str, Any]:
    """Held-out gains (per split and pooled) with t-intervals, paired differences to the baseline, time, lengths."""
    splits = [None, *runs[0]["after"]] if runs else [None]
    heldout: dict[str, Any] = {}
    for split in splits:
        gain = _metric_by_seed(runs, split)
        base = _metric_by_seed(baseline, split)
        paired = [gain[s] - base[s] for s in gain if s in base]
        after = [pooled_pass(r["after"]) if split is None else r["after"][split]["pass@1"] for r in runs]
        heldout[split or "pooled"] = {
            "after": t_interval(after),
            "gain": t_interval(list(gain.values())),
            "gain_minus_baseline": t_interval(paired),
        }
    steps_s = [sum(r["step_s"]) for r in runs]
    base_s = {r["seed"]: sum(r["step_s"]) for r in baseline}
    lengths = [row["tokens"] for r in runs for row in r["trained"]]
    resumed = [row["tokens"] for r in runs for row in r["trained"] if row["resumed"]]
    return {
        "seeds": sorted(r["seed"] for r in runs),
        "heldout_pass@1": heldout,
        "eval_sampling_se_median": statistics.median([eval_sampling_se(r["after"]) for r in runs]) if runs else None,
        "steps_total_s": t_interval(steps_s),
        "time_vs_baseline": t_interval([sum(r["step_s"]) / base_s[r["seed"]] for r in runs if r["seed"] in base_s]),
        "reward_per_step": _mean_curve([r["reward_per_step"] for r in runs]),
        "trained_tokens": _length_stats(lengths),
        "trained_tokens_resumed_mean": statistics.fmean(resumed) if resumed else None,
        "trained_resumed_frac": len(resumed) / len(lengths) if lengths else 0.0,
    }


def _mean_curve(curves: list[list[float]]) -> list[float]:
    width = min((len(c) for c in curves), default=0)
    return [statistics.fmean(c[i] for c in curves) for i in range(width)]


def _length_stats(lengths: list[int]) -> dict[str, Any]:
    if not lengths:
        return {"n": 0}
    cuts = statistics.quantiles(lengths, n=10, method="inclusive") if len(lengths) > 1 else [lengths[0]] * 9
    return {"n": len(lengths), "mean": statistics.fmean(lengths), "p10": cuts[0], "p50": cuts[4], "p90": cuts[8]}


def plot(summary: dict[str, Any], runs: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """One PNG: held-out gain per variant (t-intervals), reward per step, step time, trained-length ECDFs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary)
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    ax = axes[0][0]
    for i, name in enumerate(names):
        for j, (split, cell) in enumerate(summary[name]["heldout_pass@1"].items()):
            gain = cell["gain"]
            if gain["mean"] is None:
                continue
            err = None if gain["lo"] is None else [[gain["mean"] - gain["lo"]], [gain["hi"] - gain["mean"]]]
            ax.errorbar(
                i + 0.12 * j, gain["mean"], yerr=err, fmt="o", capsize=3, color=f"C{j}", label=split if i == 0 else None
            )
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xticks(range(len(names)), names, rotation=20)
    ax.set_title("held-out pass@1 gain (after - before), 95% t-interval over seeds")
    ax.legend(fontsize=8)
    ax = axes[0][1]
    for name in names:
        ax.plot(range(1, len(summary[name]["reward_per_step"]) + 1), summary[name]["reward_per_step"], label=name)
    ax.set_title("training reward per step (mean over seeds)")
    ax.set_xlabel("step")
    ax.legend(fontsize=8)
    ax = axes[1][0]
    for i, name in enumerate(names):
        cell = summary[name]["steps_total_s"]
        err = None if cell["lo"] is None else [[cell["mean"] - cell["lo"]], [cell["hi"] - cell["mean"]]]
        ax.bar(i, cell["mean"], yerr=err, capsize=3, color=f"C{i}")
    ax.set_xticks(range(len(names)), names, rotation=20)
    ax.set_title("wall time of all steps (s), 95% t-interval")
    ax = axes[1][1]
    for name in names:
        lengths = sorted(row["tokens"] for r in runs[name] for row in r["trained"])
        if lengths:
            ax.step(lengths, [(k + 1) / len(lengths) for k in range(len(lengths))], where="post", label=name)
    ax.set_title("trained completion length (tokens), ECDF")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
