"""What a job says when it has nothing left to train: a ``--resume`` of a finished run, and a stop signal that
arrived while the last step was running (the run is complete then, not interrupted)."""

from __future__ import annotations

from pathlib import Path

from agentrl.job.run_config import RunConfig
from agentrl.trainer.resume import resume_command


def after_eval_pending(cfg: RunConfig, run_dir: Path) -> bool:
    """True when ``eval.splits`` names a split whose evaluation after training has not been written."""
    return any(not (run_dir / f"eval-after-{split}.json").is_file() for split in cfg.eval.splits)


def finished_run_note(cfg: RunConfig, run_dir: Path, start_step: int) -> str | None:
    """The line a ``--resume`` of a run that trained all its steps prints (None when steps remain)."""
    total = cfg.trainer.steps
    if start_step < total:
        return None
    then = (
        "running the evaluation after training, which the last job skipped"
        if after_eval_pending(cfg, run_dir)
        else "nothing to do (raise trainer.steps with --accept-config-changes to train on)"
    )
    return f"{run_dir} already finished: its checkpoint is step {start_step} of {total}; {then}"


def stopped_in_last_step_note(cfg: RunConfig, run_dir: Path, last_step: int) -> str:
    """The line a job prints when a stop signal arrived during its last step: the run is complete."""
    evaluation = (
        f"; the evaluation after training was skipped ({resume_command(run_dir)} runs it)"
        if after_eval_pending(cfg, run_dir)
        else ""
    )
    return (
        f"the stop signal arrived during the last step: all {last_step} steps are trained and checkpointed{evaluation}"
    )
