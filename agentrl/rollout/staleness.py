"""The staleness bound of partial rollouts, applied at admission and at load.

Staleness of an episode = current policy version - the oldest version among its sampled tokens.
"""

from __future__ import annotations

from typing import Literal

from agentrl.trajectory import Episode

StalenessDecision = Literal["keep", "restart", "mask"]


def staleness(episode: Episode, current_version: int) -> int:
    """Versions between the episode's oldest sampled token and ``current_version`` (0 if none)."""
    oldest = episode.min_version
    return 0 if oldest is None else max(0, current_version - oldest)


def decide(
    episode: Episode, current_version: int, max_staleness: int, policy: Literal["drop", "mask"]
) -> StalenessDecision:
    """keep (fresh enough), restart (policy drop: discard tokens, new episode), or mask (keep it;
    the trainer masks tokens older than its ``max_token_lag``)."""
    if staleness(episode, current_version) <= max_staleness:
        return "keep"
    return "restart" if policy == "drop" else "mask"
