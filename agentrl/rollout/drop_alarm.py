"""The drop-rate alarm: with ``rollout.on_failure: drop``, a step that drops too many groups stops the run.

A step's drop rate is dropped / (dropped + trained) groups. A step hands out ``prompts_per_step``
groups, so the rate would exceed ``rollout.max_drop_rate`` once more than
``max_drop_rate / (1 - max_drop_rate) * prompts_per_step`` groups are dropped: the alarm fires as soon
as that is certain, inside the step. An env that fails every episode (a bug) therefore stops the run
within its first step with the episodes' last errors, instead of dropping groups forever.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agentrl.trajectory import Episode

LAST_ERRORS = 3


def drop_rate(dropped: int, trained: int) -> float:
    """dropped / (dropped + trained), 0 when nothing settled."""
    return dropped / (dropped + trained) if dropped + trained else 0.0


class DropAlarm:
    """Decides when a step has dropped too many groups, and words the error (what failed, the value, the fix)."""

    def __init__(self, max_rate: float, groups_per_step: int) -> None:
        self.max_rate = max_rate
        # Most groups a full step may drop with its rate still <= max_rate (inf: never stop).
        self.tolerated = math.inf if max_rate >= 1.0 else math.floor(max_rate / (1.0 - max_rate) * groups_per_step)

    def problem(self, dropped: Sequence[Sequence[Episode]], trained: int | None = None) -> str | None:
        """The error text when the step must stop, else None.

        ``trained`` is the step's batch size once it is known; before that (mid-step) the alarm
        fires only when the rate is already certain to exceed the limit.
        """
        count = len(dropped)
        if count == 0:
            return None
        too_many = count > self.tolerated if trained is None else drop_rate(count, trained) > self.max_rate
        if not too_many:
            return None
        errors = [e.error for group in dropped for e in group if e.error]
        last = list(dict.fromkeys(reversed(errors)))[:LAST_ERRORS]  # newest first, each distinct text once
        so_far = "so far" if trained is None else f"against {trained} trained"
        return (
            f"{count} groups were dropped this step {so_far}: the drop rate exceeds rollout.max_drop_rate="
            f"{self.max_rate}. Last errors: {' | '.join(last) or 'none recorded'}. Fix the cause (an env that raises "
            "or returns the wrong shape fails every episode), or raise rollout.max_drop_rate (1 never stops the run)"
        )
