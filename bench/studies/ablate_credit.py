"""Credit-assignment ablation and the GSPO clipping observation, side by side over seeds (JSON + two PNGs).

Every arm is the same training job (CONFIG plus the shared overrides) with one change: the per-turn
advantage scheme (``outcome``, ``outcome_plus_turn``, ``discounted_return``, all with GSPO-token) or
the loss (``grpo``: token-level ratios, GRPO's clip range 0.2/0.28, outcome advantages, so it differs
from the ``outcome`` arm in the loss alone). Each (arm, seed) is one ``agentrl train`` run with a
held-out evaluation every ``--eval-every`` steps on a fixed task subset (paired: the same sampling
seeds at every evaluation of a run, and the same seed gives every arm the same before-evaluation).

Unattended and resumable: each run's result is written to ``OUT/results/<arm>-s<seed>.json`` as it
finishes and a rerun skips it; a run killed after a checkpoint is resumed (``--resume``), one killed
before is started again. With ``--lock FILE`` each run holds that file's lock (``flock``) while it
trains, so runs interleave with other heavy jobs instead of holding the machine for hours.

    .venv/bin/python bench/studies/ablate_credit.py configs/quickstart.yaml --out runs/ablation \\
        --arms outcome,outcome_plus_turn,discounted_return --seeds 0,1,2 trainer.steps=4 [key=value ...]
    .venv/bin/python bench/studies/ablate_credit.py configs/quickstart.yaml --out runs/clipping \\
        --arms outcome,grpo --seeds 0,1,2 trainer.steps=4 trainer.mini_batches=2
    .venv/bin/python bench/studies/ablate_credit.py configs/quickstart.yaml --out runs/ablation --report-only

Outputs: ``OUT/ablation.json`` (per arm and step: mean, min, max over seeds), ``OUT/credit.png``
(per split: held-out pass@1's change since the run's own step 0, and the recovery rate, per step; per-turn
schemes vs outcome) and ``OUT/clipping.png`` (GRPO vs GSPO-token: token clip fraction, training success,
held-out pass@1's change).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Each arm names its loss and scheme in full (settings included), so an arm means the same whatever the base
# config sets. lam 0.5 as in configs/quickstart.yaml: lam <= 1 keeps a turn's shaping below the outcome.
ARMS: dict[str, list[str]] = {
    "outcome": ["algorithm.loss=gspo_token", "algorithm.turn_advantage=outcome"],
    "outcome_plus_turn": ["algorithm.loss=gspo_token", "algorithm.turn_advantage={kind: outcome_plus_turn, lam: 0.5}"],
    "discounted_return": ["algorithm.loss=gspo_token", "algorithm.turn_advantage=discounted_return"],
    "grpo": ["algorithm.loss={kind: grpo, eps_low: 0.2, eps_high: 0.28}", "algorithm.turn_advantage=outcome"],
}
SPLITS = ("test_instances", "test_kinds")
CREDIT_ARMS = ("outcome", "outcome_plus_turn", "discounted_return")
CLIP_ARMS = ("outcome", "grpo")  # GSPO-token and GRPO, both with outcome advantages


def run_name(arm: str, seed: int) -> str:
    """Directory and result name of one run."""
    return f"{arm}-s{seed}"


@contextlib.contextmanager
def held(lock: Path | None) -> Iterator[None]:
    """Hold ``lock``'s exclusive flock for the block (no lock: nothing to hold)."""
    if lock is None:
        yield
        return
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def train_command(args: argparse.Namespace, arm: str, seed: int, run_dir: Path) -> list[str]:
    """``agentrl train`` for one (arm, seed): resumed when the run left a checkpoint, else from the start."""
    cmd = [sys.executable, "-m", "agentrl", "train", args.config]
    if (run_dir / "checkpoints").exists() and any((run_dir / "checkpoints").glob("step_*")):
        cmd += ["--resume", str(run_dir)]
    elif run_dir.exists():
        shutil.rmtree(run_dir)  # killed before its first checkpoint: nothing worth keeping
    return cmd + [
        *args.overrides,
        *ARMS[arm],
        f"seed={seed}",  # the trainer, the task order and the sampler: the seeds are independent runs
        f"eval.every_steps={args.eval_every}",
        f"logging.run_root={args.out / 'runs'}",
        f"logging.run_name={run_name(arm, seed)}",
        "logging.progress=false",
        "logging.wandb_mode=disabled",
    ]


def read_metrics(run_dir: Path) -> dict[int, dict[str, float]]:
    """metrics.jsonl merged per step (a resumed run may log a step twice: the later record wins)."""
    steps: dict[int, dict[str, float]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        steps.setdefault(int(record.pop("step")), {}).update(record)
    return steps


def run_result(arm: str, seed: int, run_dir: Path, wall_s: float) -> dict[str, Any]:
    """Per-step curves of one finished run: held-out pass@1 and recovery per split, training metrics."""
    steps = read_metrics(run_dir)

    def curve(key: str) -> dict[str, float]:
        return {str(step): values[key] for step, values in sorted(steps.items()) if key in values}

    curves = {
        f"{split}/{name}": curve(f"eval/{split}/{name}") for split in SPLITS for name in ("pass@1", "recovery_frac")
    }
    for key in (
        "episode/success_rate",
        "train/clip_frac_token",
        "train/clip_frac_seq",
        "train/optimizer_steps",
        "episode/recovery_frac",
    ):
        curves[key] = curve(key)
    return {"arm": arm, "seed": seed, "run_dir": str(run_dir), "wall_s": wall_s, "curves": curves}


def check_arms(config: str, overrides: list[str], arms: list[str]) -> list[str]:
    """Validate every arm's config before hours of training (a bad override fails here, naming the arm), and
    return warnings: with one mini-batch per step every optimizer step is on-policy, so neither clipping arm
    clips a token and the GSPO-token vs GRPO comparison cannot show anything."""
    from agentrl.errors import AgentRLError
    from agentrl.job.loader import load_config

    warnings = []
    for arm in arms:
        try:
            cfg = load_config(config, [*overrides, *ARMS[arm]])
        except AgentRLError as exc:
            raise SystemExit(f"[ablate] arm {arm!r} does not make a valid config: {exc}") from exc
        if arm in CLIP_ARMS and "grpo" in arms and cfg.trainer.mini_batches == 1:
            warnings.append(
                f"arm {arm!r} trains with trainer.mini_batches=1: each batch takes one on-policy optimizer step, "
                "so its clip fraction stays 0 and clipping.png cannot compare GSPO-token with GRPO; "
                "pass trainer.mini_batches=2 (or more) for the clipping arms"
            )
    return warnings


def run_one(args: argparse.Namespace, arm: str, seed: int) -> dict[str, Any]:
    """Train one (arm, seed) unless its result exists; returns the result (also written to disk)."""
    result_path = args.out / "results" / f"{run_name(arm, seed)}.json"
    if result_path.exists():
        return json.loads(result_path.read_text())
    run_dir = args.out / "runs" / run_name(arm, seed)
    with held(args.lock):
        cmd = train_command(args, arm, seed, run_dir)
        print(f"[ablate] {run_name(arm, seed)}: {' '.join(cmd[2:])}", flush=True)
        started = time.perf_counter()
        log = args.out / "logs" / f"{run_name(arm, seed)}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as handle:
            code = subprocess.run(cmd, check=False, stdout=handle, stderr=subprocess.STDOUT).returncode
        if code != 0:
            tail = "\n".join(log.read_text().splitlines()[-5:])
            raise SystemExit(f"[ablate] {run_name(arm, seed)} failed (exit {code}); its log {log} ends:\n{tail}")
        wall = time.perf_counter() - started
    result = run_result(arm, seed, run_dir, wall)
    result_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    tmp.replace(result_path)  # a result file exists only once complete
    print(f"[ablate] {run_name(arm, seed)} done in {wall:.0f} s", flush=True)
    return result


def reread(result: dict[str, Any]) -> dict[str, Any]:
    """A finished run's result with its curves read again from its run directory (when it is still there), so a
    report picks up curves added to ``run_result`` after the run."""
    run_dir = Path(result["run_dir"])
    if not (run_dir / "metrics.jsonl").exists():
        return result
    return run_result(result["arm"], result["seed"], run_dir, result["wall_s"])


def spread(results: list[dict[str, Any]], key: str) -> dict[str, dict[str, float]]:
    """Per step: mean, min, max and n over the runs that logged ``key`` at that step."""
    steps = sorted({int(s) for r in results for s in r["curves"].get(key, {})})
    out = {}
    for step in steps:
        values = [r["curves"][key][str(step)] for r in results if str(step) in r["curves"].get(key, {})]
        out[str(step)] = {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "n": len(values)}
    return out


def with_changes(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` plus, per split, held-out pass@1 minus the run's own step-0 value (``<split>/pass@1 change``).

    Seeds differ in their before-evaluation (other sampling seeds), by more than training moves a run; the
    change since step 0 is paired within a run, so its spread over seeds is what training did, not where each
    seed started."""
    curves = dict(result["curves"])
    for split in SPLITS:
        points = curves.get(f"{split}/pass@1", {})
        if "0" in points:
            curves[f"{split}/pass@1 change"] = {step: value - points["0"] for step, value in points.items()}
    return {**result, "curves": curves}


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm: every curve's spread over seeds, the final held-out gain per split, and the wall time."""
    arms: dict[str, Any] = {}
    results = [with_changes(r) for r in results]
    for arm in dict.fromkeys(r["arm"] for r in results):
        runs = [r for r in results if r["arm"] == arm]
        keys = sorted({k for r in runs for k in r["curves"]})
        gains = {}
        for split in SPLITS:
            points = [r["curves"][f"{split}/pass@1"] for r in runs if r["curves"].get(f"{split}/pass@1")]
            gains[split] = [p[max(p, key=int)] - p[min(p, key=int)] for p in points]
        arms[arm] = {
            "seeds": [r["seed"] for r in runs],
            "wall_s": [r["wall_s"] for r in runs],
            "heldout_gain": gains,
            "curves": {key: spread(runs, key) for key in keys},
        }
    clipping = {arm: clip_when_stepped_twice([r for r in results if r["arm"] == arm]) for arm in CLIP_ARMS}
    if all(clipping[arm]["steps"] for arm in CLIP_ARMS):
        arms["clipping"] = clipping
        if clipping["grpo"]["clip_frac_token"] > 0:
            clipping["ratio_gspo_token_over_grpo"] = (
                clipping["outcome"]["clip_frac_token"] / clipping["grpo"]["clip_frac_token"]
            )
    return arms


def clip_when_stepped_twice(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Mean token clip fraction over the (seed, step) pairs whose update took two or more optimizer steps.

    The first optimizer step of an update is on-policy (ratio 1, nothing to clip), and a mini-batch without
    advantage signal takes no step, so a training step that took one optimizer step says nothing about clipping;
    averaging it in would measure how often a second mini-batch had signal, not the loss."""
    fractions = [
        run["curves"]["train/clip_frac_token"][step]
        for run in runs
        for step, count in run["curves"].get("train/optimizer_steps", {}).items()
        if count >= 2 and step in run["curves"].get("train/clip_frac_token", {})
    ]
    return {"clip_frac_token": statistics.fmean(fractions) if fractions else 0.0, "steps": len(fractions)}


def _band(ax: Any, points: dict[str, dict[str, float]], label: str) -> None:
    steps = [int(s) for s in points]
    ax.plot(steps, [p["mean"] for p in points.values()], marker=".", label=label)
    ax.fill_between(steps, [p["min"] for p in points.values()], [p["max"] for p in points.values()], alpha=0.2)


def plot(summary: dict[str, Any], arms: tuple[str, ...], panels: list[tuple[str, str]], path: Path, title: str) -> None:
    """One row of panels (title, curve key); per arm the mean over seeds, shaded from min to max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    for ax, (panel, key) in zip(axes, panels):
        for arm in arms:
            if arm in summary and summary[arm]["curves"].get(key):
                _band(ax, summary[arm]["curves"][key], arm)
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("step")
        if "clip" in key:
            ax.set_yscale("symlog", linthresh=1e-4)
        if key.endswith("change"):
            ax.axhline(0.0, color="grey", linewidth=0.6)
        if ax.lines:
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def report(args: argparse.Namespace, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Write ablation.json and both PNGs from the finished runs."""
    summary = summarise(results)
    (args.out / "ablation.json").write_text(json.dumps({"config": args.config, "overrides": args.overrides, **summary}))
    seeds = f"{len({r['seed'] for r in results})} seeds, shaded min-max"
    credit = [(f"held-out {s} pass@1, change since step 0", f"{s}/pass@1 change") for s in SPLITS]
    credit += [(f"held-out {s} recovery", f"{s}/recovery_frac") for s in SPLITS]
    plot(summary, CREDIT_ARMS, credit, args.out / "credit.png", f"per-turn credit vs outcome (GSPO-token; {seeds})")
    clipping = [
        ("token clip fraction", "train/clip_frac_token"),
        ("optimizer steps per training step", "train/optimizer_steps"),
        ("training success rate", "episode/success_rate"),
        *[(f"held-out {s} pass@1, change since step 0", f"{s}/pass@1 change") for s in SPLITS],
    ]
    plot(summary, CLIP_ARMS, clipping, args.out / "clipping.png", f"GSPO-token ('outcome') vs GRPO ({seeds})")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("overrides", nargs="*", help="key=value overrides shared by every arm (e.g. trainer.steps=8)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {sorted(ARMS)}")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--eval-every", type=int, default=2, help="held-out evaluation every N steps")
    parser.add_argument("--lock", type=Path, default=None, help="flock this file around each run")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the JSON and PNGs from results/")
    args = parser.parse_args()
    arms = args.arms.split(",")
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        parser.error(f"unknown arms {unknown}; choose from {sorted(ARMS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    for warning in [] if args.report_only else check_arms(args.config, args.overrides, arms):
        print(f"[ablate] WARNING: {warning}", file=sys.stderr, flush=True)
    if args.report_only:
        results = [reread(json.loads(p.read_text())) for p in sorted((args.out / "results").glob("*.json"))]
    else:  # seed-major: every arm has its first seed before any arm has its third
        results = [run_one(args, arm, seed) for seed in seeds for arm in arms]
    summary = report(args, results)
    print(json.dumps({k: v for k, v in summary.items() if not isinstance(v, dict) or "heldout_gain" not in v}))
    for arm in arms:
        if arm in summary:
            print(f"[ablate] {arm}: held-out gain per seed {summary[arm]['heldout_gain']}", flush=True)


if __name__ == "__main__":
    main()
