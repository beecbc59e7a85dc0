"""Several training runs' held-out evaluations side by side: did the agent improve in every run, by more than noise?

Each run directory holds what ``agentrl train`` wrote (``eval-before-<split>.json``, ``eval-after-<split>.json``,
``metrics.jsonl``). Per run and split: pass@1 before and after, the paired change with its 95 % interval over
tasks, and the agent's behaviour (turns, testing before submitting, recovery after a failed run). A change is
judged by its paired interval alone: "rose" when the interval lies above 0, "fell" when below, otherwise "not
distinguishable from 0" (the before-evaluations' spread says nothing here: greedy evaluations have none).
Then the main job's targets (``targets``): training success, mean of the last quarter of steps minus the first
quarter's, per run; the held-out paired change per run; and recovery after a failed run, pooled over the runs.

    .venv/bin/python bench/studies/heldout_report.py runs/quickstart-A runs/quickstart-B runs/quickstart-C [--json \\
        out.json]

Prints a Markdown table (one column per run) and the verdict lines; ``--json`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mainjob_targets import success_per_step, targets, targets_text  # noqa: E402

from agentrl.trainer.heldout import paired_gain  # noqa: E402
from agentrl.util.stats import t_interval  # noqa: E402

BEHAVIOUR = {
    "turns_mean": "turns used",
    "tested_before_submit_frac": "tested before submitting",
    "recovery_frac": "recovered after a failed run",
    "valid_tool_call_frac": "valid tool calls",
}


class MissingEvaluation(RuntimeError):
    """A run directory lacks a before or after evaluation of a split."""


def _report(run_dir: Path, phase: str, split: str) -> dict[str, Any]:
    path = run_dir / f"eval-{phase}-{split}.json"
    if not path.exists():
        raise MissingEvaluation(
            f"{path} is missing: the run did not finish both evaluations of {split!r} "
            "(set eval.splits in its config, or let the run finish)"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def run_summary(run_dir: Path, splits: list[str]) -> dict[str, Any]:
    """One run: per split before/after pass@1, the paired gain and behaviour; training success and times."""
    out: dict[str, Any] = {"run": str(run_dir), "splits": {}}
    eval_s = 0.0
    for split in splits:
        before, after = _report(run_dir, "before", split), _report(run_dir, "after", split)
        eval_s += before["duration_s"] + after["duration_s"]
        out["splits"][split] = {
            "before": before["pass_at_k"]["1"],
            "after": after["pass_at_k"]["1"],
            "gain": paired_gain(run_dir, split),
            "behaviour": {k: (before["behaviour"].get(k), after["behaviour"].get(k)) for k in BEHAVIOUR},
        }
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    out["success_per_step"] = success_per_step(steps)
    # Groups of each batch with a non-zero advantage, and groups dynamic sampling replaced (runs since 2026-12-02).
    out["signal_per_step"] = [
        (r["rollout/signal_groups"], r.get("rollout/groups_filtered", 0.0))
        for r in steps
        if "rollout/signal_groups" in r
    ]
    out["train_steps_s"] = sum(r.get("perf/step_s", 0.0) for r in steps)
    out["eval_s"] = eval_s
    return out


def verdict(interval: dict[str, Any] | None) -> str:
    """'rose' when the 95 % interval lies above 0, 'fell' when below, else 'not distinguishable from 0' (also when
    there is no interval: one task, or a missing evaluation)."""
    if not interval or interval.get("lo") is None or interval.get("hi") is None:
        return "not distinguishable from 0"
    if interval["lo"] > 0:
        return "rose"
    if interval["hi"] < 0:
        return "fell"
    return "not distinguishable from 0"


def across_runs(runs: list[dict[str, Any]], splits: list[str]) -> dict[str, Any]:
    """Per split: the before-evaluations' spread, the mean change over runs with its interval over runs, and how
    many runs' paired intervals over tasks lie above 0."""
    out = {}
    for split in splits:
        befores = [r["splits"][split]["before"] for r in runs]
        changes = [r["splits"][split]["after"] - r["splits"][split]["before"] for r in runs]
        verdicts = [verdict(r["splits"][split]["gain"]) for r in runs]
        out[split] = {
            "before_spread": max(befores) - min(befores),
            "change": t_interval(changes),
            "verdict_over_runs": verdict(t_interval(changes)),
            "verdicts": verdicts,
            "runs_rose": sum(v == "rose" for v in verdicts),
            "rose_in_every_run": all(v == "rose" for v in verdicts),
        }
    return out


def _fmt_gain(gain: dict[str, Any] | None) -> str:
    if not gain or gain["mean"] is None:
        return "n/a"
    if gain["lo"] is None:
        return f"{gain['mean']:+.2f}"
    return f"{gain['mean']:+.2f} [{gain['lo']:+.2f}, {gain['hi']:+.2f}]"


def markdown(runs: list[dict[str, Any]], summary: dict[str, Any], splits: list[str]) -> str:
    """The table (a column per run) and a verdict line per split."""
    lines = ["| | " + " | ".join(Path(r["run"]).name for r in runs) + " |", "|---" * (len(runs) + 1) + "|"]

    def row(label: str, cells: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    for split in splits:
        row(
            f"`{split}` pass@1",
            [f"{r['splits'][split]['before']:.2f} → {r['splits'][split]['after']:.2f}" for r in runs],
        )
        row(f"`{split}` paired change [95 % over tasks]", [_fmt_gain(r["splits"][split]["gain"]) for r in runs])
        for key, label in BEHAVIOUR.items():
            cells = []
            for r in runs:
                b, a = r["splits"][split]["behaviour"][key]
                cells.append("n/a" if b is None or a is None else f"{b:.2f} → {a:.2f}")
            row(f"`{split}` {label}", cells)
    row("training success per step", [", ".join(f"{s:.2f}" for s in r["success_per_step"]) for r in runs])
    if any(r.get("signal_per_step") for r in runs):
        row(
            "groups with signal / filtered out, per step",
            [", ".join(f"{a:.0f}/{b:.0f}" for a, b in r.get("signal_per_step", [])) or "n/a" for r in runs],
        )
    row("training steps / evaluations (s)", [f"{r['train_steps_s']:.0f} / {r['eval_s']:.0f}" for r in runs])
    for split, s in summary.items():
        change = s["change"]
        interval = "" if change["lo"] is None else f" [{change['lo']:+.2f}, {change['hi']:+.2f}]"
        lines.append(
            f"\n{split}: paired change per run: "
            + "; ".join(f"{Path(r['run']).name} {_fmt_gain(r['splits'][split]['gain'])}" for r in runs)
            + f"\n{split}: per run: {', '.join(s['verdicts'])} (rose, its interval above 0, in {s['runs_rose']} of "
            f"{len(runs)}); mean change over {change['n']} runs {change['mean']:+.3f}{interval}: "
            f"{s['verdict_over_runs']}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Summarise the runs, print the table and verdicts; returns (and optionally writes) the numbers."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="Run directories of agentrl train.")
    parser.add_argument("--splits", default="test_kinds,test_instances")
    parser.add_argument("--json", type=Path, help="Also write the numbers here.")
    parser.add_argument(
        "--target-split", default="test_instances", help="The split the held-out and recovery targets are judged on."
    )
    args = parser.parse_args(argv)
    splits = args.splits.split(",")
    try:
        runs = [run_summary(run_dir, splits) for run_dir in args.runs]
    except MissingEvaluation as exc:
        parser.error(str(exc))
    summary = across_runs(runs, splits)
    print(markdown(runs, summary, splits))
    goals = targets(runs, args.runs, args.target_split)
    print("\n" + targets_text(goals))
    result = {"runs": runs, "across_runs": summary, "targets": goals}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
