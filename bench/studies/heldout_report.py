"""Several training runs' held-out evaluations side by side: did the agent improve in every run, by more than noise?

Each run directory holds what ``agentrl train`` wrote (``eval-before-<split>.json``, ``eval-after-<split>.json``,
``metrics.jsonl``). Per run and split: pass@1 before and after, the paired change with its 95 % interval over
tasks, and the agent's behaviour (turns, testing before submitting, recovery after a failed run). Over the runs:
the spread (min-max) of the before-evaluations, the mean change with a 95 % t-interval over runs, and the
verdict the main-job issue asks for: pass@1 rose in every run, and by more than the before-evaluations' spread.

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

from agentrl.trainer.heldout import paired_gain  # noqa: E402
from agentrl.util.stats import t_interval  # noqa: E402

BEHAVIOUR = {
    "turns_mean": "turns used",
    "tested_before_submit_frac": "tested before submitting",
    "recovery_frac": "recovered after a failed run",
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
    out["success_per_step"] = [r["episode/success_rate"] for r in steps if "episode/success_rate" in r]
    # Groups of each batch with a non-zero advantage, and groups dynamic sampling replaced (runs since 2026-12-02).
    out["signal_per_step"] = [
        (r["rollout/signal_groups"], r.get("rollout/groups_filtered", 0.0))
        for r in steps
        if "rollout/signal_groups" in r
    ]
    out["train_steps_s"] = sum(r.get("perf/step_s", 0.0) for r in steps)
    out["eval_s"] = eval_s
    return out


def across_runs(runs: list[dict[str, Any]], splits: list[str]) -> dict[str, Any]:
    """Per split: the before-evaluations' spread, the mean change over runs, and whether every run rose by more
    than that spread."""
    out = {}
    for split in splits:
        befores = [r["splits"][split]["before"] for r in runs]
        changes = [r["splits"][split]["after"] - r["splits"][split]["before"] for r in runs]
        spread = max(befores) - min(befores)
        out[split] = {
            "before_spread": spread,
            "change": t_interval(changes),
            "rose_in_every_run": all(c > 0 for c in changes),
            "every_rise_beyond_spread": all(c > spread for c in changes),
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
            f"\n{split}: mean change over {change['n']} runs {change['mean']:+.3f}{interval}; before-evaluation spread "
            f"{s['before_spread']:.2f}; rose in every run: {'yes' if s['rose_in_every_run'] else 'no'}; every rise "
            f"beyond the spread: {'yes' if s['every_rise_beyond_spread'] else 'no'}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Summarise the runs, print the table and verdicts; returns (and optionally writes) the numbers."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="Run directories of agentrl train.")
    parser.add_argument("--splits", default="test_kinds,test_instances")
    parser.add_argument("--json", type=Path, help="Also write the numbers here.")
    args = parser.parse_args(argv)
    splits = args.splits.split(",")
    try:
        runs = [run_summary(run_dir, splits) for run_dir in args.runs]
    except MissingEvaluation as exc:
        parser.error(str(exc))
    summary = across_runs(runs, splits)
    print(markdown(runs, summary, splits))
    result = {"runs": runs, "across_runs": summary}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
