"""The held-out evaluation's splits one after the other against all at once (JSON on stdout), on the engine the
main job evaluates with (``eval.precision``: the float32 twin of its embedded engine), forms alternating.

``together`` is ``heldout_eval`` as ``agentrl train`` runs it (the splits share ``eval.concurrency``);
``one_by_one`` evaluates each split alone at the full concurrency, as before. Both report every task's result,
and the script says whether all evaluations agreed task by task (greedy float32 should).

Usage: .venv/bin/python scripts/bench/bench_eval_splits.py [--config configs/quickstart.yaml] [--rounds 2]
       [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from agentrl.config.run import RunConfig
from agentrl.engines.factory import make_engine
from agentrl.models.loading import load_tokenizer
from agentrl.trainer.eval_engine import evaluation_engine, needs_float32_twin
from agentrl.trainer.heldout import evaluate_split, heldout_eval


def per_task(reports: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[bool]]]:
    return {split: {t["task_id"]: t["successes"] for t in report["tasks"]} for split, report in reports.items()}


async def one_by_one(cfg: RunConfig, engine: Any, tokenizer: Any) -> dict[str, dict[str, Any]]:
    reports = {}
    for split in cfg.eval.splits:
        report = await evaluate_split(cfg, engine, tokenizer, split)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "report.json"
            report.write_json(path)
            reports[split] = json.loads(path.read_text())
    return reports


async def together(cfg: RunConfig, engine: Any, tokenizer: Any) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as folder:
        await heldout_eval(cfg, engine, tokenizer, Path(folder), "bench")
        return {s: json.loads((Path(folder) / f"eval-bench-{s}.json").read_text()) for s in cfg.eval.splits}


async def run(cfg: RunConfig, rounds: int) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(cfg.model.path, dtype=torch.float32)
    tokenizer = load_tokenizer(cfg.model.path)
    # The twin views the policy's weights; a machine without fast bf16 evaluates on the rollout engine itself.
    engine = None if needs_float32_twin(cfg) else make_engine(cfg.engine, cfg.model)
    walls: dict[str, list[float]] = {"one_by_one": [], "together": []}
    results = []
    async with evaluation_engine(cfg, engine, policy, threads=torch.get_num_threads()) as evaluator:
        for _ in range(rounds):
            for form, fn in (("one_by_one", one_by_one), ("together", together)):
                started = time.perf_counter()
                reports = await fn(cfg, evaluator, tokenizer)
                walls[form].append(time.perf_counter() - started)
                results.append(per_task(reports))
    if engine is not None:
        await engine.close()
    medians = {form: statistics.median(values) for form, values in walls.items()}
    return {
        "splits": cfg.eval.splits,
        "concurrency": cfg.eval.concurrency,
        "wall_s": walls,
        "median_wall_s": medians,
        "together_over_one_by_one": medians["together"] / medians["one_by_one"],
        "all_evaluations_agree": all(result == results[0] for result in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/quickstart.yaml")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cfg = RunConfig.model_validate(yaml.safe_load(Path(args.config).read_text()))
    with contextlib.redirect_stdout(sys.stderr):  # the evaluation's log lines; stdout carries the JSON alone
        report = {"config": args.config, **asyncio.run(run(cfg, args.rounds))}
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
