"""Held-out evaluation inside ``agentrl train``: pass@1 on each ``eval.splits`` split before and after training.

It reuses the training engine (so "after" measures the synced policy) and ``agentrl.evaluation``'s
episode loop; results go to ``eval-<phase>-<split>.json`` in the run directory and to the run log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.config.run import RunConfig
from agentrl.evaluation import EvalReport, evaluate
from agentrl.rollout.stack import eval_plan
from agentrl.trainer.seeding import SeededEngine


async def evaluate_split(cfg: RunConfig, engine: Any, tokenizer: Any, split: str) -> EvalReport:
    """pass@1 of ``engine`` on ``split`` of the run's env (greedy when ``eval.temperature`` is 0)."""
    plan = eval_plan(
        cfg, samples=cfg.eval.samples, split=split, temperature=cfg.eval.temperature, max_tasks=cfg.eval.max_tasks
    )
    # Common random numbers: the same seed stream before and after training, so the comparison is
    # paired (the same model samples the same answers) and its noise shrinks to what training changed.
    paired = SeededEngine(engine, cfg.trainer.seed)
    paired.set_step(-1)
    return await evaluate(
        paired,
        plan.env_factory,
        tokenizer,
        plan.rollout,
        samples=cfg.eval.samples,
        ks=(1,),
        task_ids=plan.task_ids,
        concurrency=cfg.eval.concurrency,
    )


async def heldout_eval(cfg: RunConfig, engine: Any, tokenizer: Any, run_dir: Path, phase: str) -> dict[str, float]:
    """Evaluate every ``eval.splits`` split; returns ``{"eval/<split>/pass@1": ..., ...}`` (empty when none)."""
    metrics: dict[str, float] = {}
    for split in cfg.eval.splits:
        report = await evaluate_split(cfg, engine, tokenizer, split)
        report.write_json(run_dir / f"eval-{phase}-{split}.json")
        metrics[f"eval/{split}/pass@1"] = report.pass_at_k["1"]
        metrics[f"eval/{split}/reward_mean"] = report.mean_reward
        metrics.update({f"eval/{split}/{name}": value for name, value in report.behaviour.items()})
        print(f"[eval {phase}] {split}: {report.summary()}", flush=True)
    return metrics


def summary_lines(before: dict[str, float], after: dict[str, float]) -> list[str]:
    """'held-out test_kinds pass@1: 0.33 -> 0.61 (+0.28)' for every split evaluated both times, then the agent
    behaviour (turns used, testing before submitting, recovery after a failed run) when episodes had several turns."""
    lines = []
    for key, value in after.items():
        if key.endswith("/pass@1") and key in before:
            split = key.split("/")[1]
            lines.append(f"held-out {split} pass@1: {before[key]:.2f} -> {value:.2f} ({value - before[key]:+.2f})")
            multi_turn = max(before.get(f"eval/{split}/turns_mean", 1.0), after.get(f"eval/{split}/turns_mean", 1.0))
            if multi_turn > 1.0:
                lines.append(f"  behaviour {split}: " + behaviour_changes(before, after, split))
    return lines


def behaviour_changes(before: dict[str, float], after: dict[str, float], split: str) -> str:
    """'turns 1.8 -> 2.1, tested before submit 0.40 -> 0.55, ...' for one split."""
    labels = {
        "turns_mean": "turns",
        "tested_before_submit_frac": "tested before submit",
        "failed_run_frac": "had a failed run",
        "recovery_frac": "recovered after a failed run",
    }
    parts = []
    for name, label in labels.items():
        key = f"eval/{split}/{name}"
        if key in before and key in after:
            parts.append(f"{label} {before[key]:.2f} -> {after[key]:.2f}")
    return ", ".join(parts)
