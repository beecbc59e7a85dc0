"""Per-turn advantages of episodes by the configured scheme, and whether a group carries any learning signal.

Shared by the trainer (its rows' advantages) and the rollout (dynamic sampling: a group whose every
advantage is zero contributes no gradient, so ``rollout.dynamic_sampling`` replaces it before training).
Both call the same function, so "uninformative" means exactly "the trainer would give it zero advantage".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from agentrl.algos import Normalization, RewardBatch
from agentrl.algos.config import AlgorithmConfig
from agentrl.trajectory import Episode


def _turn_count(episode: Episode) -> int:
    max_turn = max((k for s in episode.segments for k in s.turn_ids), default=-1)
    return max(len(episode.turns), max_turn + 1)


def reward_batch(episodes: Sequence[Episode], group_size: int) -> RewardBatch:
    """The schemes' input: R_i = final_reward, separate only when the env gave an outcome of its own."""
    turn_rewards: list[list[float | None]] = []
    for ep in episodes:
        rewards = list(ep.turn_rewards)
        turn_rewards.append(rewards + [None] * (_turn_count(ep) - len(rewards)))
    outcomes = [math.nan if ep.final_reward is None else float(ep.final_reward) for ep in episodes]
    separate = [ep.outcome is not None for ep in episodes]
    return RewardBatch(outcomes, turn_rewards, group_size, separate_outcome=separate)


def turn_advantages_of(episodes: Sequence[Episode], group_size: int, algo: AlgorithmConfig) -> list[list[float]]:
    """Per episode, per turn: the advantage ``algo.turn_advantage`` assigns (docs/algorithm.md#per-turn-credit).

    An episode whose env reported an infrastructure failure (``Episode.infra_failure``) is no sample of the
    policy: it gets zero advantage, and its group's advantages are computed over the other episodes."""
    norm = Normalization(eps=algo.adv_eps, scale=algo.adv_scale)
    if not any(ep.infra_failure for ep in episodes):
        return algo.turn_advantage(reward_batch(episodes, group_size), norm)  # type: ignore[operator]
    out: list[list[float]] = []
    for start in range(0, len(episodes), group_size):
        group = episodes[start : start + group_size]
        kept = [ep for ep in group if not ep.infra_failure]
        scored = iter(algo.turn_advantage(reward_batch(kept, len(kept)), norm) if len(kept) > 1 else [])  # type: ignore[operator]
        for ep in group:
            out.append([0.0] * _turn_count(ep) if ep.infra_failure or len(kept) < 2 else next(scored))
    return out


def carries_signal(group: Sequence[Episode], algo: AlgorithmConfig) -> bool:
    """True when some turn of some episode of this one group gets a non-zero advantage (it moves the policy)."""
    return any(a != 0.0 for turns in turn_advantages_of(group, len(group), algo) for a in turns)


def signal_filter(algo: AlgorithmConfig) -> Callable[[Sequence[Episode]], bool]:
    """``carries_signal`` bound to one algorithm config: the rollout's dynamic-sampling predicate."""
    return lambda group: carries_signal(group, algo)
