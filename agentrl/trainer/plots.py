"""PNG plots of a run (reward, success, clip fraction, |log s|, entropy, lengths, engine-trainer mismatch,
held-out pass@1, agent behaviour, groups with signal, staleness), rendered headless (Agg)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

PANELS: list[tuple[str, list[str]]] = [
    ("reward", ["episode/reward_mean"]),
    ("success rate", ["episode/success_rate"]),
    ("clip fraction", ["train/clip_frac_seq", "train/clip_frac_token"]),
    ("|log s|", ["train/abs_log_s_mean", "train/mb0_abs_log_s_p90"]),
    ("entropy", ["train/entropy"]),
    ("lengths (tokens)", ["episode/completion_tokens_mean", "episode/sampled_tokens_mean"]),
    ("engine-trainer |delta logprob|", ["audit/abs_mean", "audit/abs_max", "mismatch/abs_mean", "mismatch/abs_max"]),
    (
        "clipped before the update",
        [
            "audit/pre_update_clip_frac_seq",
            "audit/pre_update_clip_frac_token",
            "mismatch/pre_update_clip_frac_seq",
            "mismatch/pre_update_clip_frac_token",
        ],
    ),
    ("held-out pass@1", ["eval/test_instances/pass@1", "eval/test_kinds/pass@1"]),
    ("agent behaviour", ["episode/recovery_frac", "episode/tested_before_submit_frac", "episode/failed_run_frac"]),
    ("version lag of trained tokens", ["train/token_lag_mean", "train/token_lag_max"]),
    ("async: busy seconds", ["perf/update_s", "perf/collect_s", "perf/overlap_s"]),
    ("groups: with signal, filtered out", ["rollout/signal_groups", "rollout/groups_filtered"]),
    ("dropped for staleness", ["async/stale_dropped_frac", "train/is_masked_frac_seq", "train/is_truncated_frac_seq"]),
]


def write_plots(history: list[dict[str, Any]], path: Path) -> None:
    """One figure with a panel per metric family; written to a temp file, then renamed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = math.ceil(len(PANELS) / 2)
    fig, axes = plt.subplots(2, columns, figsize=(4.4 * columns, 7))
    for ax in axes.flat[len(PANELS) :]:
        ax.set_visible(False)
    for ax, (title, keys) in zip(axes.flat, PANELS):
        for key in keys:
            points = [(r["step"], r[key]) for r in history if key in r]
            if points:
                ax.plot(*zip(*points), marker=".", label=_label(key))
        ax.set_title(title)
        ax.set_xlabel("step")
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=80)
    plt.close(fig)
    os.replace(tmp, path)


def _label(key: str) -> str:
    """Legend text: drop the family prefix a panel title already says; keep audit/ vs mismatch/ apart."""
    for prefix in ("train/", "episode/", "eval/"):
        key = key.removeprefix(prefix)
    return key.removesuffix("/pass@1")
