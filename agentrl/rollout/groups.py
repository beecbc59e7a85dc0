"""A group in flight: the G episode runners of one task, and its lifecycle state.

Lifecycle: inflight -> ready (all G finished) -> handed (in a step's batch) -> trained
(``commit_step``); or inflight -> dropped (a member failed and ``on_failure=drop``); or inflight ->
filtered (complete but without learning signal, under ``rollout.dynamic_sampling``).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentrl.rollout.buffer import GroupState, StoredGroup
from agentrl.rollout.runner import EpisodeRunner
from agentrl.trajectory import Episode


@dataclass
class GroupRun:
    """The runners of one group plus its state; ``seq`` is the task's dataset position."""

    group_id: str
    task_id: str
    seq: int
    runners: list[EpisodeRunner]
    state: GroupState = "inflight"
    step: int | None = None

    @property
    def episodes(self) -> list[Episode]:
        """The G episodes, in slot order."""
        return [r.episode for r in self.runners]

    @property
    def finished(self) -> bool:
        """True when every member is complete, truncated or failed."""
        return all(r.finished for r in self.runners)

    def failed_runner(self) -> EpisodeRunner | None:
        """The first member that failed, if any."""
        return next((r for r in self.runners if r.episode.status == "failed"), None)

    def stored(self) -> StoredGroup:
        """The buffer's view of this group."""
        return StoredGroup(self.group_id, self.task_id, self.seq, self.state, self.step, self.episodes)
