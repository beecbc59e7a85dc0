"""The end of a training step, shared by the sync and async loops: weight sync, commit, archive, log, checkpoint.

Order (both modes): the update is done and, in async mode, so is the next step's collection (its
buffer boundary written); then the weights reach the engine, the step's groups are committed as
trained and archived, the metrics are logged, and the checkpoint copies the buffer. A checkpoint of
step k therefore holds "trained <= k" plus, in async mode, step k+1's handed groups, which a
``--resume`` trains first: nothing is lost or trained twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from agentrl.rollout.archive import TrajectoryArchive
from agentrl.trainer.boundary import StepBoundaries
from agentrl.trainer.checkpoint import save_checkpoint
from agentrl.trainer.distributed import full_state_dict
from agentrl.trainer.episode_stats import episode_metrics
from agentrl.trainer.sync import sync_weights


@dataclass
class StepOutcome:
    """What one step produced, for its end: the batch it trained, its metrics and when it started."""

    step: int
    groups: list[list[Any]]
    rollout_metrics: dict[str, float]
    train_metrics: dict[str, float]
    exhausted: bool
    started: float
    extra: dict[str, float] = field(default_factory=dict)


async def end_step(s: Any, out: StepOutcome, boundaries: StepBoundaries) -> bool:
    """Sync, commit, archive, log and maybe checkpoint step ``out.step``; True when the loop must stop."""
    step = out.step
    sync_s = await sync_weights(s.engine, s.lm, step, transport=s.transport, dist=s.dist)
    if s.dist.is_main:
        s.orchestrator.commit_step(step)
        if s.orchestrator.buffer is not None:  # trained groups leave the buffer (and later checkpoints)
            TrajectoryArchive(s.run_dir).archive(s.orchestrator.buffer, step)
    boundary = boundaries.decide(step, out.exhausted)  # every rank: checkpoint? stop (a signal)?
    wall = time.perf_counter() - out.started
    tokens = out.train_metrics.get("train/trained_tokens", 0.0)
    s.reporter.log(
        step,
        {
            **out.rollout_metrics,
            **episode_metrics(out.groups),
            **out.train_metrics,
            **out.extra,
            "perf/sync_s": sync_s,
            "perf/step_s": wall,
            "perf/tokens_per_s": tokens / wall,
            "engine/weight_version": float(step),
        },
        plot=False,
    )
    if boundary.save:  # after the log: a kill in between redoes this step, its metrics record included
        save_session(s, step)
        boundaries.saved()
    s.reporter.plot(step)  # after the checkpoint: plots are not worth delaying it
    return out.exhausted or boundary.stop


def save_session(s: Any, step: int) -> None:
    """Checkpoint the policy, optimizer, scheduler and (via ``save_checkpoint``) the rollout buffer."""
    state = full_state_dict(s.lm)
    training = {"optimizer": s.updater.optimizer.state_dict(), "scheduler": s.updater.scheduler.state_dict()}
    save_checkpoint(
        s.run_dir,
        step,
        lm=s.lm,
        state=state,
        tokenizer=s.tokenizer,
        training_state=training,
        meta={"model_path": s.cfg.model.path},
        keep=s.cfg.trainer.keep_checkpoints,
        dist=s.dist,
    )
