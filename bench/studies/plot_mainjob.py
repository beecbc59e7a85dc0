"""The main job's picture: held-out pass@1 before and after training, training success per step, and the
agent's behaviour on held-out tasks, one line per run (seed).

From run directories of ``agentrl train`` (what ``bench/studies/heldout_report.py`` reads), also writing the numbers
as JSON so the picture can be redrawn without the runs:

    .venv/bin/python bench/studies/plot_mainjob.py runs/A runs/B runs/C --commit abc1234 \\
        --json docs/img/mainjob.json --out docs/img/mainjob.png

From such a JSON (the checked-in ``docs/img/mainjob.json`` holds the three-seed result recorded in
docs/results/main-job.md):

    .venv/bin/python bench/studies/plot_mainjob.py --from-json docs/img/mainjob.json --out docs/img/mainjob.png
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "studies"))

SPLITS = ("test_instances", "test_kinds")
SPLIT_LABEL = {"test_instances": "unseen tasks of trained families", "test_kinds": "a family never trained on"}
BEHAVIOUR = {
    "tested_before_submit_frac": "tested before submitting",
    "recovery_frac": "recovered after a failed run",
    "turns_mean": "turns used (of 3)",
}


class RecordError(ValueError):
    """A results JSON lacks a field the picture needs."""


def from_run_dirs(run_dirs: list[Path], commit: str | None) -> dict[str, Any]:
    """The record of several runs, in the checked-in JSON's shape, via heldout_report's per-run summary."""
    import heldout_report

    runs = []
    for run_dir in run_dirs:
        summary = heldout_report.run_summary(run_dir, list(SPLITS))
        splits = {
            split: {
                "before": s["before"],
                "after": s["after"],
                "gain": s["gain"],
                "behaviour": {key: list(pair) for key, pair in s["behaviour"].items()},
            }
            for split, s in summary["splits"].items()
        }
        runs.append(
            {
                "run": run_dir.name,
                "splits": splits,
                "success_per_step": summary["success_per_step"],
                "signal_groups_per_step": [signal for signal, _ in summary["signal_per_step"]],
            }
        )
    first = run_dirs[0]
    tasks = {
        split: json.loads((first / f"eval-before-{split}.json").read_text(encoding="utf-8"))["num_tasks"]
        for split in SPLITS
    }
    return {
        "source": "run directories " + ", ".join(str(d) for d in run_dirs),
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "command": "bench/studies/plot_mainjob.py " + " ".join(str(d) for d in run_dirs),
        "steps": max(len(r["success_per_step"]) for r in runs),
        "tasks": tasks,
        "runs": runs,
    }


def check_record(record: dict[str, Any]) -> None:
    """Refuse a record the picture cannot be drawn from, naming the missing field."""
    for key in ("source", "date", "steps", "tasks", "runs"):
        if key not in record:
            raise RecordError(
                f"the results JSON has no {key!r}: write it with bench/studies/plot_mainjob.py RUN_DIR..."
            )
    for run in record["runs"]:
        for split in SPLITS:
            split_record = run.get("splits", {}).get(split)
            if split_record is None or not {"before", "after", "behaviour"} <= set(split_record):
                raise RecordError(f"run {run.get('run')!r} has no before/after/behaviour for split {split!r}")


Pairs = list[tuple[float, float]]


def _before_after(ax: Any, series: list[tuple[str, Pairs]], steps: int, colours: Any, seeds: list[Any]) -> None:
    """One line per run and quantity from step 0 to the last step (a colour per run, a line style per quantity);
    each quantity's values after training, run by run, written at its right end (identical lines hide each
    other)."""
    from matplotlib.lines import Line2D

    styles = ("-", "--")
    for (_, pairs), style in zip(series, styles):
        for i, (before, after) in enumerate(pairs):
            ax.plot([0, steps], [before, after], style, marker="o", color=colours[i])
        afters = " / ".join(f"{after:.2f}" for _, after in pairs)
        top = max(after for _, after in pairs)
        ax.annotate(afters, (steps, top), xytext=(-6, 7), textcoords="offset points", ha="right", fontsize=7)
    quantities = [Line2D([], [], color="grey", linestyle=st, label=lb) for (lb, _), st in zip(series, styles)]
    ax.legend(handles=quantities + seeds, fontsize=7, loc="best")
    ax.set(xlabel="training step", xticks=[0, steps])


def _paired_intervals(ax: Any, runs: list[dict[str, Any]], steps: int, colours: Any) -> None:
    """At the last step, each run's paired 95 % interval of the change over tasks, drawn around its after value
    (before + the interval's bounds), slightly apart so the runs' bars do not hide each other."""
    for split_index, split in enumerate(SPLITS):
        for i, run in enumerate(runs):
            s = run["splits"][split]
            gain = s.get("gain") or {}
            if gain.get("lo") is None:
                continue
            x = steps * (1.02 + 0.025 * (i + len(runs) * split_index))
            lo, hi = s["before"] + gain["lo"], s["before"] + gain["hi"]
            ax.plot([x, x], [lo, hi], color=colours[i], linewidth=1.5, alpha=0.8)


def _success_per_step(ax: Any, runs: list[dict[str, Any]], steps: int, colours: Any) -> None:
    """Each run's training success per step, with its first- and last-quarter means as flat segments."""
    for i, run in enumerate(runs):
        points = run["success_per_step"]
        ax.plot(range(1, len(points) + 1), points, marker=".", color=colours[i], label=run["run"], alpha=0.6)
        quarter = max(1, len(points) // 4)
        for start in (0, len(points) - quarter):
            mean = sum(points[start : start + quarter]) / quarter
            ax.plot([start + 1, start + quarter], [mean, mean], color=colours[i], linewidth=3)
    ax.set(title="training success rate per step\n(thick: first- and last-quarter means)", xlabel="training step")
    ax.set_ylim(0, 1)
    ax.set_xticks(range(1, steps + 1, max(1, steps // 10)))
    ax.legend(fontsize=7)


def draw(record: dict[str, Any], out: Path) -> None:
    """Four panels: held-out pass@1 (step 0 -> last step), training success per step, behaviour fractions and
    turns used on the trained families' unseen tasks; written to a temp file, then renamed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    check_record(record)
    steps, runs = record["steps"], record["runs"]
    colours = plt.get_cmap("tab10").colors
    fig, axes = plt.subplots(1, 4, figsize=(17, 4.4))
    seeds = [Line2D([], [], color=colours[i], marker="o", label=run["run"]) for i, run in enumerate(runs)]

    pass_at_1 = [
        (
            f"{split} ({record['tasks'][split]} tasks)",
            [(r["splits"][split]["before"], r["splits"][split]["after"]) for r in runs],
        )
        for split in SPLITS
    ]
    _before_after(axes[0], pass_at_1, steps, colours, seeds)
    _paired_intervals(axes[0], runs, steps, colours)
    axes[0].set(
        title="held-out pass@1 (greedy), before and after\n(bars: before + the paired 95 % interval)", ylim=(0, 1)
    )
    _success_per_step(axes[1], runs, steps, colours)
    split = SPLITS[0]
    for ax, keys in ((axes[2], list(BEHAVIOUR)[:2]), (axes[3], list(BEHAVIOUR)[2:])):
        series = [(BEHAVIOUR[key], [tuple(r["splits"][split]["behaviour"][key]) for r in runs]) for key in keys]
        _before_after(ax, series, steps, colours, seeds)
    axes[2].set(title=f"behaviour on {split}\n({SPLIT_LABEL[split]})", ylim=(0, 1))
    axes[3].set(title=f"turns used on {split}", ylim=(1, 3))
    commit = f", commit {record['commit']}" if record.get("commit") else ""
    title = f"The main job: {len(runs)} runs of {steps} steps ({record['date']}{commit})"
    fig.suptitle(f"{title}; values after training per run at each line's end", fontsize=10)
    fig.tight_layout()
    tmp = out.with_name(f".{out.stem}.tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Draw the picture from run directories or a results JSON; returns the record drawn."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", type=Path, help="Run directories of agentrl train (one per seed).")
    parser.add_argument("--from-json", type=Path, help="Draw from this results JSON instead of run directories.")
    parser.add_argument("--json", type=Path, help="Write the runs' numbers here (with run directories).")
    parser.add_argument("--commit", help="The commit the runs trained with, recorded in --json.")
    parser.add_argument("--out", type=Path, required=True, help="The PNG to write.")
    args = parser.parse_args(argv)
    if bool(args.runs) == bool(args.from_json):
        parser.error("give either run directories or --from-json FILE")
    if args.from_json:
        record = json.loads(args.from_json.read_text(encoding="utf-8"))
    else:
        import heldout_report

        try:
            record = from_run_dirs(args.runs, args.commit)
        except heldout_report.MissingEvaluation as exc:
            parser.error(str(exc))
        if args.json:
            args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    try:
        draw(record, args.out)
    except RecordError as exc:
        parser.error(str(exc))
    return record


if __name__ == "__main__":
    main()
