"""Held-out evaluation inside ``agentrl train``: pass@1 on each ``eval.splits`` split before and after training.

It reuses the training engine (so "after" measures the synced policy) and ``agentrl.evaluation``'s
episode loop; results go to ``eval-<phase>-<split>.json`` in the run directory and to the run log. The
evaluation after training is also compared with the one before, task by task (``paired_gain``).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from agentrl.evaluation import EvalReport, evaluate
from agentrl.job.run_config import RunConfig
from agentrl.job.stack import eval_plan
from agentrl.trainer.seeding import SeededEngine
from agentrl.util.stats import t_interval


async def evaluate_split(cfg: RunConfig, engine: Any, tokenizer: Any, split: str) -> EvalReport:
    """pass@1 of ``engine`` on ``split`` of the run's env (``eval.per_split`` may set its samples and temperature;
    greedy when the temperature is 0)."""
    samples, temperature = cfg.eval.samples_for(split), cfg.eval.temperature_for(split)
    plan = eval_plan(cfg, samples=samples, split=split, temperature=temperature, max_tasks=cfg.eval.max_tasks)
    # Common random numbers: the same seed stream before and after training, so the comparison is
    # paired (the same model samples the same answers) and its noise shrinks to what training changed.
    paired = SeededEngine(engine, cfg.trainer.seed)
    paired.set_step(-1)
    return await evaluate(
        paired,
        plan.env_factory,
        tokenizer,
        plan.rollout,
        samples=samples,
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
        if phase == "after":
            metrics.update(gain_metrics(paired_gain(run_dir, split), split))
    return metrics


def _per_task_pass(path: Path) -> dict[str, float]:
    tasks = json.loads(path.read_text(encoding="utf-8"))["tasks"]
    return {t["task_id"]: statistics.fmean(t["successes"]) for t in tasks if t["successes"]}


def eval_report_paths(run_dir: Path, split: str) -> tuple[Path, Path]:
    """Where a run keeps its evaluation of ``split`` before and after training."""
    before, after = (run_dir / f"eval-{phase}-{split}.json" for phase in ("before", "after"))
    return before, after


def per_task_gains(run_dir: Path, split: str) -> dict[str, float] | None:
    """Per task both evaluations ran: pass@1 after minus before; None when either report is missing."""
    before_path, after_path = eval_report_paths(run_dir, split)
    if not (before_path.exists() and after_path.exists()):
        return None
    before, after = _per_task_pass(before_path), _per_task_pass(after_path)
    return {task: after[task] - before[task] for task in after if task in before}


def paired_gain(run_dir: Path, split: str) -> dict[str, Any] | None:
    """pass@1 after minus before on the tasks both evaluations ran, with its 95 % t-interval over tasks.

    The unit is the task, not the episode: a task's samples share its difficulty (a small model mostly solves a
    task in all of them or in none), so episodes are not independent and an interval over them is too narrow.
    Both evaluations use the same sampling seeds per task, so the difference cancels what the task shares.
    None when either report is missing (e.g. a resumed run evaluated before in an earlier job that was lost).
    """
    gains = per_task_gains(run_dir, split)
    return None if gains is None else t_interval(list(gains.values()))


def gain_metrics(gain: dict[str, Any] | None, split: str) -> dict[str, float]:
    """``eval/<split>/gain`` (+ ``_lo``, ``_hi``: the 95 % interval; ``_tasks``: how many tasks were paired)."""
    if gain is None or gain["mean"] is None:
        return {}
    out = {f"eval/{split}/gain": gain["mean"], f"eval/{split}/gain_tasks": float(gain["n"])}
    if gain["lo"] is not None:
        out.update({f"eval/{split}/gain_lo": gain["lo"], f"eval/{split}/gain_hi": gain["hi"]})
    return out


def summary_lines(before: dict[str, float], after: dict[str, float]) -> list[str]:
    """'held-out test_kinds pass@1: 0.33 -> 0.61 (+0.28, 95 % interval over 12 tasks [+0.10, +0.46])' for every
    split evaluated both times (the interval when ``after`` has the paired gain), then the agent behaviour (turns
    used, testing before submitting, recovery after a failed run) when episodes had several turns."""
    lines = []
    for key, value in after.items():
        if key.endswith("/pass@1") and key in before:
            split = key.split("/")[1]
            change = f"{value - before[key]:+.2f}{_interval_text(after, split)}"
            lines.append(f"held-out {split} pass@1: {before[key]:.2f} -> {value:.2f} ({change})")
            multi_turn = max(before.get(f"eval/{split}/turns_mean", 1.0), after.get(f"eval/{split}/turns_mean", 1.0))
            if multi_turn > 1.0:
                lines.append(f"  behaviour {split}: " + behaviour_changes(before, after, split))
    return lines


def _interval_text(after: dict[str, float], split: str) -> str:
    """', 95 % interval over 12 tasks [-0.10, +0.20]' when the paired gain has one, else ''."""
    lo, hi, tasks = (after.get(f"eval/{split}/gain_{name}") for name in ("lo", "hi", "tasks"))
    if lo is None or hi is None or tasks is None:
        return ""
    return f", 95 % interval over {tasks:.0f} tasks [{lo:+.2f}, {hi:+.2f}]"


def behaviour_changes(before: dict[str, float], after: dict[str, float], split: str) -> str:
    """'turns 1.8 -> 2.1, tested before submit 0.40 -> 0.55, ...' for one split."""
    labels = {
        "turns_mean": "turns",
        "tested_before_submit_frac": "tested before submit",
        "failed_run_frac": "had a failed run",
        "recovery_frac": "recovered after a failed run",
        "valid_tool_call_frac": "valid tool calls",
    }
    parts = []
    for name, label in labels.items():
        key = f"eval/{split}/{name}"
        if key in before and key in after:
            parts.append(f"{label} {before[key]:.2f} -> {after[key]:.2f}")
    return ", ".join(parts)
