"""Two arms of one job (runs that differ in one setting), paired by seed: which learned more on the held-out split?

Each arm is a list of ``agentrl train`` run directories; runs are paired by their config's ``seed`` (a seed fixes
the task order and the sampling seeds, so the per-seed difference cancels what the two runs share). Per seed and
task the held-out gain (pass@1 after minus before) of arm A minus arm B's; then two 95 % t-intervals: over the
seeds' mean differences (the seed is the unit: what another seed would show), and over tasks of the per-task
difference averaged over seeds (the task is the unit, as in ``mainjob_targets.pooled_recovery``). Training success
(last quarter minus first quarter of steps) is compared the same way, per seed.

    .venv/bin/python bench/studies/compare_arms.py --split test_instances \\
        --arm outcome_plus_turn=runs/a0,runs/a1,runs/a2 --arm outcome=runs/b0,runs/b1,runs/b2 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mainjob_targets import quarter_rise, success_per_step  # noqa: E402

from agentrl.trainer.heldout import eval_report_paths, per_task_gains  # noqa: E402
from agentrl.util.stats import t_interval  # noqa: E402


def _per_task_gain(run_dir: Path, split: str) -> dict[str, float]:
    """Per task: pass@1 after minus before (SystemExit naming the missing evaluation)."""
    gains = per_task_gains(run_dir, split)
    if gains is None:
        missing = [str(p) for p in eval_report_paths(run_dir, split) if not p.is_file()]
        raise SystemExit(f"{', '.join(missing)} missing: the run did not evaluate {split!r} before and after training")
    return gains


def _training_rise(run_dir: Path) -> float | None:
    """Training success, last quarter of steps minus the first quarter (None: fewer than two steps logged)."""
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return quarter_rise(success_per_step([json.loads(line) for line in lines]))["rise"]


def _by_seed(run_dirs: list[Path]) -> dict[int, Path]:
    runs: dict[int, Path] = {}
    for run_dir in run_dirs:
        seed = int((yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")) or {}).get("seed", 0))
        if seed in runs:
            raise SystemExit(f"{run_dir} and {runs[seed]} both ran seed {seed}: give each arm one run per seed")
        runs[seed] = run_dir
    return runs


def compare(arm_a: list[Path], arm_b: list[Path], split: str) -> dict[str, Any]:
    """Arm A minus arm B, paired by seed and task (see the module docstring)."""
    a, b = _by_seed(arm_a), _by_seed(arm_b)
    if set(a) != set(b):
        raise SystemExit(f"the arms ran different seeds ({sorted(a)} against {sorted(b)}): pair every seed")
    per_seed, per_task = [], {}
    for seed in sorted(a):
        gain_a, gain_b = _per_task_gain(a[seed], split), _per_task_gain(b[seed], split)
        shared = sorted(set(gain_a) & set(gain_b))
        diffs = [gain_a[t] - gain_b[t] for t in shared]
        for task, diff in zip(shared, diffs):
            per_task.setdefault(task, []).append(diff)
        rise_a, rise_b = _training_rise(a[seed]), _training_rise(b[seed])
        per_seed.append(
            {
                "seed": seed,
                "gain_a": statistics.fmean(gain_a[t] for t in shared),
                "gain_b": statistics.fmean(gain_b[t] for t in shared),
                "difference": t_interval(diffs),
                "training_rise_a": rise_a,
                "training_rise_b": rise_b,
            }
        )
    rises = [
        s["training_rise_a"] - s["training_rise_b"]
        for s in per_seed
        if s["training_rise_a"] is not None and s["training_rise_b"] is not None
    ]
    return {
        "split": split,
        "per_seed": per_seed,
        "over_seeds": t_interval([s["difference"]["mean"] for s in per_seed]),
        "over_tasks": t_interval([statistics.fmean(d) for d in per_task.values()]),
        "training_rise_difference": t_interval(rises),
    }


def _interval(value: dict[str, Any]) -> str:
    if value["mean"] is None:
        return "n/a"
    if value["lo"] is None:
        return f"{value['mean']:+.3f}"
    return f"{value['mean']:+.3f} [{value['lo']:+.3f}, {value['hi']:+.3f}]"


def report_text(result: dict[str, Any], name_a: str, name_b: str) -> str:
    """Markdown: one row per seed, then the two pooled intervals."""
    lines = [
        f"| seed | {result['split']} gain, {name_a} | gain, {name_b} | {name_a} minus {name_b} (95 % over tasks) "
        f"| training rise, {name_a} / {name_b} |",
        "|---|---|---|---|---|",
    ]
    for s in result["per_seed"]:
        rise = " / ".join("n/a" if r is None else f"{r:+.2f}" for r in (s["training_rise_a"], s["training_rise_b"]))
        lines.append(
            f"| {s['seed']} | {s['gain_a']:+.3f} | {s['gain_b']:+.3f} | {_interval(s['difference'])} | {rise} |"
        )
    lines += [
        "",
        f"{name_a} minus {name_b}, held-out gain: {_interval(result['over_seeds'])} over seeds (n = "
        f"{result['over_seeds']['n']}), {_interval(result['over_tasks'])} over tasks averaged over seeds",
        f"{name_a} minus {name_b}, training rise: {_interval(result['training_rise_difference'])} over seeds",
    ]
    return "\n".join(lines)


def _arm(text: str) -> tuple[str, list[Path]]:
    name, sep, dirs = text.partition("=")
    if not sep or not dirs:
        raise argparse.ArgumentTypeError(f"{text!r}: write --arm NAME=RUN_DIR,RUN_DIR,...")
    return name, [Path(d) for d in dirs.split(",")]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Print the comparison of the two ``--arm``s; returns it."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arm", type=_arm, action="append", required=True, help="NAME=RUN_DIR,... (twice: A, B)")
    parser.add_argument("--split", default="test_instances")
    parser.add_argument("--json", type=Path, help="Also write the numbers here.")
    args = parser.parse_args(argv)
    if len(args.arm) != 2:
        parser.error("give exactly two --arm NAME=RUN_DIR,... (A and B)")
    (name_a, dirs_a), (name_b, dirs_b) = args.arm
    result = compare(dirs_a, dirs_b, args.split)
    print(report_text(result, name_a, name_b))
    if args.json:
        args.json.write_text(json.dumps({"a": name_a, "b": name_b, **result}, indent=1), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
