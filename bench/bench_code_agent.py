"""What a model does on CodeAgent-v0 (JSON on stdout): pass@1 and agent behaviour per split.

For each split, the first ``--tasks`` tasks (families interleaved) x ``--samples`` episodes at the
config's eval temperature, seeded like the held-out evaluation (common random numbers):
pass@1, format compliance (turns with code, first replies that are a draft), turns used, episodes
that ran code before their last turn, that had a failed run, and that recovered from one.

    .venv/bin/python bench/bench_code_agent.py configs/code_agent.yaml [key=value ...] \\
        --splits train,test_instances,test_kinds --tasks 24 --samples 4 [--transcripts FILE.jsonl]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from agentrl.trajectory import Episode


def first_turn_stats(episodes: list[Episode]) -> dict[str, float]:
    """How the first reply looks: a draft of the entry point, graded at once, or no code at all."""
    firsts = [e.turns[0].info for e in episodes if e.turns]
    if not firsts:
        return {}
    return {
        "first_reply_draft_frac": sum("examples_total" in i or i.get("action") == "submit" for i in firsts)
        / len(firsts),
        "first_reply_no_code_frac": sum(i.get("action") not in ("run", "submit") for i in firsts) / len(firsts),
        "first_reply_passes_examples_frac": sum(i.get("action") == "submit" for i in firsts) / len(firsts),
    }


async def measure_split(cfg: Any, engine: Any, tokenizer: Any, split: str, args: argparse.Namespace) -> dict[str, Any]:
    """Evaluate one split and summarise its episodes."""
    from agentrl.env.registry import make_env_factory
    from agentrl.evaluation import evaluate
    from agentrl.trainer.seeding import SeededEngine

    env_cfg = cfg.env.model_copy(update={"kwargs": {**cfg.env.kwargs, "split": split}})
    factory = make_env_factory(env_cfg)
    probe = factory()
    task_ids = probe.task_ids()[: args.tasks]
    probe.close()
    rollout = cfg.rollout.model_copy(
        update={"partial_rollout": False, "group_size": args.samples, "temperature": cfg.eval.temperature}
    )
    paired = SeededEngine(engine, cfg.trainer.seed)
    paired.set_step(-1)
    episodes: list[Episode] = []
    started = time.perf_counter()
    report = await evaluate(
        paired,
        factory,
        tokenizer,
        rollout,
        samples=args.samples,
        task_ids=task_ids,
        concurrency=cfg.eval.concurrency,
        on_episode=episodes.append,
    )
    if args.transcripts:
        with open(args.transcripts, "a", encoding="utf-8") as handle:
            for episode in episodes[: args.keep]:
                handle.write(
                    json.dumps({"split": split, **episode.model_dump(include={"task_id", "messages", "final_reward"})})
                    + "\n"
                )
    completion = [sum(len(s.completion_ids) for s in e.segments) for e in episodes]
    return {
        "tasks": len(task_ids),
        "episodes": len(episodes),
        "pass@1": report.pass_at_k["1"],
        "tasks_solved_at_least_once": sum(any(t.successes) for t in report.tasks) / max(1, len(report.tasks)),
        **report.behaviour,
        **first_turn_stats(episodes),
        "episode_tokens_mean": statistics.fmean(completion) if completion else 0.0,
        "failed_episodes": report.failed_episodes,
        "wall_s": time.perf_counter() - started,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from agentrl.engines.factory import make_engine
    from agentrl.job.loader import load_config

    cfg = load_config(args.config, args.overrides)
    engine = make_engine(cfg.engine, cfg.model)
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.path)
    if args.transcripts:
        Path(args.transcripts).write_text("", encoding="utf-8")
    try:
        splits = {s: await measure_split(cfg, engine, tokenizer, s, args) for s in args.splits.split(",")}
    finally:
        await engine.close()
    return {"config": args.config, "overrides": args.overrides, "samples": args.samples, "splits": splits}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--splits", default="train,test_instances,test_kinds")
    parser.add_argument("--tasks", type=int, default=24, help="First N tasks of each split.")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--transcripts", default=None, help="Write the first --keep episodes of each split here.")
    parser.add_argument("--keep", type=int, default=8)
    print(json.dumps(asyncio.run(main(parser.parse_args())), indent=1))
