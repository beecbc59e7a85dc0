"""``agentrl eval CONFIG [overrides] [--samples N --k 1,5 --split test]``: pass@k of a model on an env's tasks.

Uses the config's model, engine (embedded or SGLang) and env; every episode runs through the
sandboxed env exactly as in training. Prints the result and writes it (with per-task outcomes) as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError


def register(subparsers: Any) -> None:
    """Add the ``eval`` subcommand."""
    parser = subparsers.add_parser("eval", help="Evaluate pass@k on an environment's task set.", description=__doc__)
    parser.add_argument("config", help="Run config YAML (model, engine, env, rollout sections).")
    parser.add_argument(
        "overrides", nargs="*", help="Dotted overrides, e.g. env.kwargs.tasks=humaneval rollout.temperature=0.2."
    )
    parser.add_argument(
        "--samples", type=int, default=1, help="Episodes per task (n of the pass@k estimator; default 1)."
    )
    parser.add_argument("--k", default="1", help="Comma-separated k values, each <= --samples (default 1).")
    parser.add_argument("--split", default=None, help="Sets env.kwargs.split (e.g. test, test_kinds, test_instances).")
    parser.add_argument("--limit", type=int, default=None, help="Evaluate only the first N tasks.")
    parser.add_argument(
        "--temperature",
        type=float,
        default=None,
        help="Sampling temperature; 0 = greedy, as the held-out evaluation of `train` (default: rollout.temperature).",
    )
    parser.add_argument("--concurrency", type=int, default=16, help="Episodes in flight at once (default 16).")
    parser.add_argument(
        "--out", default=None, help="JSON report path (default: <logging.run_root>/eval-<config>-<time>.json)."
    )
    parser.set_defaults(func=run_command)


def parse_ks(text: str, samples: int) -> list[int]:
    """``"1,5"`` -> [1, 5]; ConfigError when a k is not a positive integer or exceeds ``samples``."""
    try:
        ks = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as exc:
        raise ConfigError(f"--k {text!r} must be comma-separated integers, e.g. --k 1,5") from exc
    if not ks or ks[0] < 1 or ks[-1] > samples:
        raise ConfigError(f"--k {text!r} needs values in 1..{samples} (--samples); raise --samples or lower --k")
    return ks


def _overrides(args: argparse.Namespace) -> list[str]:
    extra = list(args.overrides)
    if args.split is not None:
        extra.append(f"env.kwargs.split={args.split}")
    return extra


async def run_eval(args: argparse.Namespace) -> Any:
    """Load the config, build engine and env factory, and evaluate; returns the EvalReport."""
    from agentrl.cli.model_path import with_run_model
    from agentrl.evaluation import evaluate
    from agentrl.job.loader import load_config
    from agentrl.job.stack import build_engine, eval_plan, load_run_tokenizer

    ks = parse_ks(args.k, args.samples)
    cfg = with_run_model(load_config(args.config, _overrides(args)), "eval")
    if args.temperature is not None and args.temperature < 0:
        raise ConfigError(f"--temperature {args.temperature} must be >= 0 (0 decodes greedily)")
    # Passed to the plan, not as rollout.temperature: that one must be > 0 (training samples), greedy is eval-only.
    plan = eval_plan(cfg, samples=args.samples, temperature=args.temperature, max_tasks=args.limit)
    engine = build_engine(cfg)
    tokenizer = load_run_tokenizer(cfg)
    done = {"episodes": 0}
    total = len(plan.task_ids) * args.samples if plan.task_ids else None

    def on_episode(_: Any) -> None:
        done["episodes"] += 1
        if total and (done["episodes"] % max(1, total // 10) == 0 or done["episodes"] == total):
            print(f"[eval] {done['episodes']}/{total} episodes", flush=True)

    try:
        return await evaluate(
            engine,
            plan.env_factory,
            tokenizer,
            plan.rollout,
            samples=args.samples,
            ks=ks,
            task_ids=plan.task_ids,
            concurrency=args.concurrency,
            on_episode=on_episode,
        ), cfg
    finally:
        await engine.close()


def run_command(args: argparse.Namespace) -> int:
    """Entry point: print pass@k and write the JSON report."""
    report, cfg = asyncio.run(run_eval(args))
    out = (
        Path(args.out)
        if args.out
        else Path(cfg.logging.run_root) / f"eval-{Path(args.config).stem}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    report.write_json(out)
    print(f"[eval] {cfg.env.id}: {report.summary()}", flush=True)
    print(f"[eval] report: {out}", flush=True)
    return 0
