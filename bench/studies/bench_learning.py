"""Do agentrl's speed-ups cost learning? The same job trained side by side in variants that switch each speed-up
on alone, then all together, against exact on-policy synchronous training, over several seeds (JSON + one PNG).

Variants are data: named override sets (``VARIANTS`` below, or ``--variants-file`` with a JSON object of
``name: [override, ...]``). A variant the config rejects (e.g. an override this version does not
know) is reported as skipped, with the reason. A seed sets ``trainer.seed``, ``rollout.seed`` (task
order) and ``engine.seed``; the held-out evaluation samples with seeds derived from ``trainer.seed``, so every
variant of one seed is evaluated with the same sampling seeds, and the base model once per seed ("before").

Each run (variant, seed) is one training job plus the held-out evaluation of its final model, in one
subprocess; its result is written to ``OUT/runs/<variant>-s<seed>.json`` as soon as it finishes, the summary and
the plot are rewritten after every run, and a rerun skips finished runs (the real setting runs unattended and
survives a kill). Runs go seed by seed, variants interleaved, so a stopped bench has balanced partial results
and a shared machine's load drift hits every variant alike. See ``learning_stats.py`` for the statistics.

    python bench/studies/bench_learning.py --config configs/quickstart_single.yaml --seeds 0,1,2,3,4 --out \\
        runs/bench_learning
    python bench/studies/bench_learning.py --config CFG --variants exact_sync,all --seeds 0,1 --steps 1 --out \\
        /tmp/x  # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_runs import heldout_argv, run_worker, train_argv
from learning_stats import plot, variant_summary

BASELINE = "exact_sync"
# How pi_old is made; each variant pins one, so a config's own algorithm settings cannot change what it means.
RECOMPUTED = ["algorithm.old_logprobs=recompute", "algorithm.proximal=recompute", "algorithm.is_correction=none"]
ENGINE = ["algorithm.old_logprobs=engine", "algorithm.proximal=behaviour", "algorithm.is_correction=none"]
# engine logprobs as the behaviour policy, the clip at the step-start policy, truncated IS (docs/algorithm.md)
DECOUPLED = ["algorithm.old_logprobs=engine", "algorithm.proximal=recompute", "algorithm.is_correction=tis"]
PARTIAL = ["rollout.partial_rollout=true", "rollout.batch_order=finish"]
ALL = [*PARTIAL, *ENGINE]  # every speed-up, with the plain objective
VARIANTS: dict[str, list[str]] = {
    # exact on-policy: every sampled group is trained in the step that sampled it; pi_old recomputed by the trainer
    "exact_sync": ["rollout.partial_rollout=false", *RECOMPUTED],
    # one speed-up at a time
    "partial": [*PARTIAL, *RECOMPUTED],
    "partial_start": ["rollout.partial_rollout=true", "rollout.batch_order=start", *RECOMPUTED],
    "engine_logprobs": ["rollout.partial_rollout=false", *ENGINE],
    "async": ["rollout.partial_rollout=false", *ENGINE, "trainer.mode=async"],
    # async with the objective made for its stale samples (every trained token is about one version old, so the
    # plain objective's band clips them): the configs' decoupled default, as a user would run async
    "async_recompute_stale": [
        "rollout.partial_rollout=false",
        "algorithm.old_logprobs=engine",
        "algorithm.proximal=recompute_stale",
        "algorithm.is_correction=tis",
        "trainer.mode=async",
    ],
    # all together
    "all": ALL,
    "all_start": ["rollout.partial_rollout=true", "rollout.batch_order=start", *ENGINE],
    # all, with carried (stale) partials clipped against the step-start policy instead of their behaviour policy
    # and weighted by the truncated behaviour ratio: configs/quickstart*.yaml's default since it measured as
    # well as exact_sync. interpolate needs no forward but leaves a lag-1 ratio at half its distance from 1,
    # still far outside GSPO's band (docs/algorithm.md). (recompute without the IS weight is exactly "partial".)
    "all_recompute": [*PARTIAL, *DECOUPLED],
    # the same objective with the recompute forward over stale rows only (fresh rows' proximal is the engine's,
    # which matches the trainer's to ~1e-6 here): configs/quickstart*.yaml's default since 2026-12-02
    "all_recompute_stale": [
        *PARTIAL,
        "algorithm.old_logprobs=engine",
        "algorithm.proximal=recompute_stale",
        "algorithm.is_correction=tis",
    ],
    "all_interpolate": [
        *PARTIAL,
        "algorithm.old_logprobs=engine",
        "algorithm.proximal=interpolate",
        "algorithm.is_correction=none",
    ],
}


def seed_overrides(seed: int) -> list[str]:
    """What a seed changes: the trainer's RNG and eval seeds, the task order, the engine's sampler."""
    return [f"seed={seed}"]


def usable_variants(config: str, overrides: list[str], variants: dict[str, list[str]]) -> tuple[dict, dict]:
    """(variants the config accepts, {skipped name: the reason})."""
    from agentrl.errors import AgentRLError
    from agentrl.job.loader import load_config

    usable, skipped = {}, {}
    for name, extra in variants.items():
        try:
            load_config(config, [*overrides, *extra])
        except AgentRLError as exc:
            skipped[name] = " ".join(str(exc).split())
            continue
        usable[name] = extra
    return usable, skipped


def _write_json(path: Path, data: Any) -> None:
    """Write atomically: a kill mid-write never leaves a torn result that a rerun would trust."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def before_eval(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The base model's held-out results under this seed's evaluation seeds (cached in OUT/runs)."""
    path = args.out / "runs" / f"before-s{seed}.json"
    if path.is_file():
        return json.loads(path.read_text())["splits"]
    overrides = [*args.overrides, *seed_overrides(seed)]
    result = run_worker(
        heldout_argv(args.config, overrides, args.model_path, "before", args.out / "eval" / f"s{seed}"),
        args.out / "logs" / f"before-s{seed}.log",
    )
    _write_json(path, result)
    return result["splits"]


def train_run(args: argparse.Namespace, name: str, extra: list[str], seed: int, before: dict) -> dict[str, Any]:
    """One training job and its held-out evaluation; the slim record kept per run (checkpoints deleted)."""
    job = args.out / "jobs" / f"{name}-s{seed}"
    shutil.rmtree(job, ignore_errors=True)  # a run killed mid-way restarts from scratch
    overrides = [*args.overrides, *extra, *seed_overrides(seed)]
    result = run_worker(
        train_argv(args.config, overrides, job, then_heldout=True), args.out / "logs" / f"{job.name}.log"
    )
    shutil.rmtree(job / "checkpoints", ignore_errors=True)  # model + optimizer: ~1.6 GB per SmolLM2 run
    return {
        "variant": name,
        "seed": seed,
        "overrides": overrides,
        "step_s": result["step_s"],
        "reward_per_step": result["reward_per_step"],
        "success_per_step": result["success_per_step"],
        "trained": [{k: row[k] for k in ("step", "tokens", "resumed", "reward")} for row in result["trained"]],
        "peak_rss_gb": result["peak_rss_gb"],
        "before": before,
        "after": result["after"]["splits"],
    }


def load_runs(out: Path, names: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Every finished run under ``out/runs``, by variant."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for path in sorted((out / "runs").glob("*-s*.json")):
        record = json.loads(path.read_text())
        if record.get("variant") in runs:
            runs[record["variant"]].append(record)
    return runs


def summarize(args: argparse.Namespace, variants: dict[str, list[str]], skipped: dict[str, str]) -> dict[str, Any]:
    """The report (and the PNG) from every finished run."""
    runs = load_runs(args.out, list(variants))
    baseline = runs.get(BASELINE, [])
    done = {name: rows for name, rows in runs.items() if rows}
    summary = {name: variant_summary(rows, baseline) for name, rows in done.items()}
    report = {
        "config": args.config,
        "overrides": args.overrides,
        "baseline": BASELINE,
        "seeds": args.seeds,
        "variants": variants,
        "skipped": skipped,
        "intervals": "95% Student-t over seeds; gain_minus_baseline is paired by seed (learning_stats.py)",
        "summary": summary,
    }
    _write_json(args.out / "bench_learning.json", report)
    if summary:
        plot(summary, done, args.out / "bench_learning.png")
    return report


def main() -> None:
    """Plan the runs, run the missing ones, and keep the summary current."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/quickstart_single.yaml", help="The job every variant runs.")
    parser.add_argument("-o", "--override", dest="overrides", action="append", default=[], help="Override (all runs).")
    parser.add_argument("--variants", default=None, help="Comma-separated names (default: every variant).")
    parser.add_argument("--variants-file", type=Path, default=None, help="JSON {name: [override, ...]} to use instead.")
    parser.add_argument("--seeds", default="0,1,2,3,4", help="Comma-separated seeds (>= 5 for the real setting).")
    parser.add_argument("--steps", type=int, default=None, help="Training steps per run (default: the config's).")
    parser.add_argument("--out", type=Path, default=Path("runs/bench_learning"), help="Output (and resume) directory.")
    args = parser.parse_args()
    from agentrl.job.loader import load_config

    catalogue = json.loads(args.variants_file.read_text()) if args.variants_file else VARIANTS
    wanted = args.variants.split(",") if args.variants else list(catalogue)
    unknown = [name for name in wanted if name not in catalogue]
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; known: {list(catalogue)}")
    if BASELINE not in wanted:
        raise SystemExit(f"--variants must include the baseline {BASELINE!r} (differences are taken against it)")
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.overrides += [f"trainer.steps={args.steps}"] if args.steps else []
    args.model_path = load_config(args.config, args.overrides).model.path
    usable, skipped = usable_variants(args.config, args.overrides, {name: catalogue[name] for name in wanted})
    (args.out / "runs").mkdir(parents=True, exist_ok=True)
    for name, reason in skipped.items():
        print(f"[bench] skipping variant {name}: {reason}", flush=True)
    for seed in args.seeds:
        before = before_eval(args, seed)
        for name, extra in usable.items():
            path = args.out / "runs" / f"{name}-s{seed}.json"
            if path.is_file():
                continue
            print(f"[bench] {name} seed {seed} ...", flush=True)
            _write_json(path, train_run(args, name, extra, seed, before))
            summarize(args, usable, skipped)
    report = summarize(args, usable, skipped)
    print(json.dumps(report["summary"], indent=1))
    print(f"[bench] report: {args.out / 'bench_learning.json'}, plot: {args.out / 'bench_learning.png'}")


if __name__ == "__main__":
    main()
