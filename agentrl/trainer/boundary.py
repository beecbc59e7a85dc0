"""What a training step boundary does besides committing: checkpoint (by step count, by time, at the end,
on a stop request) and whether the job stops there.

Invariant: every torchrun rank takes the same decision at the same step (the per-rank wishes are
sum-reduced), because a checkpoint and a stop both need every rank: FSDP gathers the full state
dict collectively and each rank writes its optimizer shard.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from agentrl.config.sections import TrainerConfig
from agentrl.trainer.distributed import DistInfo
from agentrl.trainer.interrupt import StopSignals


@dataclass(frozen=True)
class Boundary:
    """The decision at one step boundary."""

    save: bool
    stop: bool


class StepBoundaries:
    """Decides, at each step boundary, whether to checkpoint and whether to stop (see the module docstring)."""

    def __init__(self, cfg: TrainerConfig, dist: DistInfo, signals: StopSignals | None = None) -> None:
        self.cfg, self.dist, self.signals = cfg, dist, signals
        self.stopped_at: int | None = None  # the step after which a stop request ended the loop
        self._last_save = time.monotonic()

    def decide(self, step: int, exhausted: bool) -> Boundary:
        """The decision after ``step`` (every rank must call this at every step: it is a collective)."""
        stop_wish = self.signals is not None and self.signals.requested is not None
        time_due = (
            self.cfg.checkpoint_every_s is not None
            and time.monotonic() - self._last_save >= self.cfg.checkpoint_every_s
        )
        stop, time_due = _any_rank([stop_wish, time_due], self.dist)
        last = step == self.cfg.steps or exhausted
        save = stop or time_due or last or step % self.cfg.checkpoint_every_steps == 0
        if stop:
            self.stopped_at = step
        return Boundary(save=save, stop=stop)

    def saved(self) -> None:
        """A checkpoint was written: the time cadence counts from now."""
        self._last_save = time.monotonic()


def _any_rank(wishes: list[bool], dist: DistInfo) -> list[bool]:
    """Element-wise OR over ranks (a no-op world of one without torchrun)."""
    if not dist.enabled:
        return wishes
    import torch.distributed as tdist

    # nccl reduces only CUDA tensors; gloo only CPU ones.
    device = torch.device("cuda", torch.cuda.current_device()) if tdist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([float(w) for w in wishes], device=device)
    tdist.all_reduce(t)
    return [bool(v > 0) for v in t.tolist()]
