"""PNG plots of a run (reward and the env's own reward components, success, turns, clip fraction, |log s|,
entropy, lengths, engine-trainer mismatch, held-out pass@1, agent behaviour, groups with signal, staleness),
rendered headless (Agg).

Only what the run measured is drawn: a panel none of whose metrics was logged is left out (its title
is listed under the figure as not measured), and a step that trained nothing (0 optimizer steps) has no
update metrics, so entropy, |log s| and clip fractions show a gap there (noted in the panel) instead of a
0 that reads like a collapse. Steps are integers on the x axis.
"""

from __future__ import annotations

import math
import os
import textwrap
from pathlib import Path
from typing import Any

COMPONENTS = "reward components (env)"  # the panel of the env's info["reward_components"], found by prefix
COMPONENT_PREFIX = "episode/reward_"
NOT_COMPONENTS = {"episode/reward_mean", "episode/reward_std"}

PANELS: list[tuple[str, list[str]]] = [
    ("reward", ["episode/reward_mean"]),
    (COMPONENTS, []),
    ("reward integrity: canary pass rate, flagged share", ["integrity/canary_pass_rate", "reward/hack_suspect_frac"]),
    ("success rate", ["episode/success_rate", "rollout/success_rate"]),
    ("turns per episode", ["episode/turns_mean"]),
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

# Under a panel whose numbers need a unit or a reading (wrapped under its title).
CAPTIONS: dict[str, str] = {
    "engine-trainer |delta logprob|": "nats per sampled token between the engine's logprob and the trainer's "
    "recompute of it (bf16 vs float32 shows here); GSPO's band is ~4e-4 per sequence mean",
    "clip fraction": "share of trained sequences / tokens whose ratio the loss clipped (they give no gradient)",
    "|log s|": "mean |log of the sequence ratio| (GSPO's band: 3-4e-4); p90 of mini-batch 0 before any update",
    "clipped before the update": "share the loss would clip against the engine's logprobs before any update",
}

# Measured only by an update that ran: on a step with 0 optimizer steps they are logged as 0 but mean nothing.
UPDATE_ONLY = {
    "train/clip_frac_seq",
    "train/clip_frac_token",
    "train/abs_log_s_mean",
    "train/mb0_abs_log_s_p90",
    "train/entropy",
    "train/is_masked_frac_seq",
    "train/is_truncated_frac_seq",
}


def measured(record: dict[str, Any], key: str) -> bool:
    """True when ``record`` (one step) measured ``key``: logged, and for update metrics, an update ran."""
    if key not in record:
        return False
    return key not in UPDATE_ONLY or record.get("train/optimizer_steps", 1.0) != 0


def panels_for(history: list[dict[str, Any]]) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """(panels with at least one measured point, titles of the panels this run measured nothing for)."""
    components = sorted({k for r in history for k in r if k.startswith(COMPONENT_PREFIX) and k not in NOT_COMPONENTS})
    shown, empty = [], []
    for title, keys in PANELS:
        keys = components if title == COMPONENTS else keys
        if any(measured(r, k) for r in history for k in keys):
            shown.append((title, keys))
        else:
            empty.append(title)
    return shown, empty


def write_plots(history: list[dict[str, Any]], path: Path) -> None:
    """One figure with a panel per measured metric family; written to a temp file, then renamed."""
    import matplotlib.pyplot as plt

    fig = make_figure(history)
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=80)
    plt.close(fig)
    os.replace(tmp, path)


def make_figure(history: list[dict[str, Any]]) -> Any:
    """The figure ``write_plots`` saves (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    shown, empty = panels_for(history)
    columns = max(1, math.ceil(len(shown) / 2))
    fig, axes = plt.subplots(2, columns, figsize=(4.4 * columns, 7.4), squeeze=False)
    for ax in axes.flat[len(shown) :]:
        ax.set_visible(False)
    for ax, (title, keys) in zip(axes.flat, shown):
        _draw_panel(ax, history, keys)
        caption = CAPTIONS.get(title)
        ax.set_title(f"{title}\n{textwrap.fill(caption, 48)}" if caption else title, fontsize=9 if caption else None)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if empty:
        fig.text(0.01, 0.005, f"not measured in this run: {', '.join(empty)}", fontsize=7, color="grey")
    fig.tight_layout(rect=(0, 0.025 if empty else 0, 1, 1))
    return fig


def _draw_panel(ax: Any, history: list[dict[str, Any]], keys: list[str]) -> None:
    """Each key's measured points (NaN, a gap, where a step did not measure it), and a note naming those steps."""
    unmeasured: set[int] = set()
    for key in keys:
        points = [(r["step"], r[key] if measured(r, key) else math.nan) for r in history if key in r]
        unmeasured.update(step for step, value in points if math.isnan(value))
        if any(not math.isnan(value) for _, value in points):
            ax.plot(*zip(*points), marker=".", label=_label(key))
    if unmeasured:
        steps = ", ".join(str(s) for s in sorted(unmeasured)[:6]) + (" ..." if len(unmeasured) > 6 else "")
        ax.text(0.02, 0.02, f"not measured (nothing trained): step {steps}", transform=ax.transAxes, fontsize=6)
    if ax.lines:
        ax.legend(fontsize=7)


def _label(key: str) -> str:
    """Legend text: drop the family prefix a panel title already says; keep audit/ vs mismatch/ apart."""
    if key.startswith(COMPONENT_PREFIX):
        return key.removeprefix(COMPONENT_PREFIX)
    for prefix in ("train/", "episode/", "eval/"):
        key = key.removeprefix(prefix)
    return key.removesuffix("/pass@1")
