"""The bundled advantage schemes as registered objects, ``turn_advantages`` and the token broadcast.

The schemes are those of docs/algorithm.md#per-turn-schemes.

Each scheme reads the outcomes and turn rewards of a ``RewardBatch`` without counting a reward twice:
an outcome that is the sum of the turn rewards (the env set no separate outcome) is never added to
them again, and those turn rewards get no turn term of their own (see ``agentrl.algos.scheme_base``
for the reward semantics).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Sequence
from typing import ClassVar, Literal

import torch
from pydantic import Field, ValidationError

from agentrl.algos.scheme_base import (
    SCHEMES,
    AdvantageScheme,
    Normalization,
    RewardBatch,
    normalize_by_key,
    outcome_advantages,
)
from agentrl.errors import ConfigError


def _reward(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


class Outcome(AdvantageScheme):
    """Scheme O: every turn of episode i gets the outcome advantage A^O_i (GSPO-token then equals GSPO)."""

    kind: Literal["outcome"] = "outcome"
    per_turn: ClassVar[bool] = False
    scales: ClassVar[tuple[str, ...]] = ("std", "none")

    def advantages(self, rewards: RewardBatch, norm: Normalization) -> list[list[float]]:
        """A_ik = A^O_i (with adv_scale none: R_i minus the group mean, Dr-GRPO)."""
        adv_o = outcome_advantages(rewards, norm)
        return [[adv_o[i]] * len(turns) for i, turns in enumerate(rewards.turn_rewards)]


class OutcomePlusTurn(AdvantageScheme):
    """Scheme T (MT-GRPO generalised to K turns): A_ik = A^O_i + lam * Norm_(g,k)(r_ik).

    The turn term reads the turn rewards of episodes whose outcome is separate (the env set
    ``info["outcome"]``). An episode whose R_i is the sum of its turn rewards already has them in
    A^O_i: adding them again per turn would count each twice, so it gets A^O_i on every turn and its
    turn rewards join no (g, k) normalisation. A batch with such episodes is reported once (a warning).
    """

    kind: Literal["outcome_plus_turn"] = "outcome_plus_turn"
    lam: float = Field(1.0, description="Weight of the turn reward normalised over the group's k-th turns (lambda).")

    def advantages(self, rewards: RewardBatch, norm: Normalization) -> list[list[float]]:
        """Turns without a reward, and every turn of an episode whose outcome is its return, get A^O_i only."""
        adv_o = outcome_advantages(rewards, norm)
        values: list[float] = []
        keys: list[Hashable] = []
        slots: list[tuple[int, int]] = []
        returns = [i for i in range(len(rewards.turn_rewards)) if not rewards.is_separate(i)]
        if returns:
            _warn_return_outcomes(len(returns), len(rewards.turn_rewards))
        for i, turns in enumerate(rewards.turn_rewards):
            if not rewards.is_separate(i):
                continue  # R_i = sum_k r_ik is already in A^O_i
            for k, reward in enumerate(turns):
                value = _reward(reward)
                if value is not None:
                    values.append(value)
                    keys.append((rewards.group_of(i), k))
                    slots.append((i, k))
        out = [[adv_o[i]] * len(turns) for i, turns in enumerate(rewards.turn_rewards)]
        for (i, k), value in zip(slots, normalize_by_key(values, keys, norm)):
            out[i][k] += self.lam * value
        return out


def _warn_return_outcomes(count: int, total: int) -> None:
    warnings.warn(
        f"turn_advantage outcome_plus_turn: {count} of {total} episodes have no separate outcome (the env set no "
        "info['outcome'] on their last step, or the rollout ended them first: token budget, rollout.max_turns), so "
        "their outcome is the sum of their turn rewards; they get the outcome advantage only (a turn term would "
        "count each turn reward twice). Set info['outcome'] on every step that can end an episode, or use "
        "turn_advantage: discounted_return for credit by return-to-go",
        TurnCreditWarning,
        stacklevel=3,
    )


class TurnCreditWarning(UserWarning):
    """An advantage scheme fell back to less per-turn credit than it names (see its message)."""


class DiscountedReturn(AdvantageScheme):
    """Scheme R (GTPO / GiGPO-step): A_ik = alpha * A^O_i + omega * Norm_key(G_ik), G_ik the return-to-go."""

    kind: Literal["discounted_return"] = "discounted_return"
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount over turns of the return-to-go.")
    episode_weight: float = Field(0.0, description="Weight of the outcome advantage A^O_i (alpha; GiGPO: 1).")
    step_weight: float = Field(1.0, description="Weight of the normalised return-to-go (omega; GiGPO: 1).")

    def returns_to_go(self, rewards: RewardBatch, i: int) -> list[float]:
        """G_ik = sum_{j>=k} gamma^(j-k) r~_ij, r~ the turn rewards (None -> 0) plus a separate outcome on the last."""
        shaped = [_reward(r) or 0.0 for r in rewards.turn_rewards[i]]
        outcome = rewards.outcome(i)
        if shaped and outcome is not None and rewards.is_separate(i):
            shaped[-1] += outcome
        returns = [0.0] * len(shaped)
        running = 0.0
        for k in range(len(shaped) - 1, -1, -1):
            running = shaped[k] + self.gamma * running
            returns[k] = running
        return returns

    def advantages(self, rewards: RewardBatch, norm: Normalization) -> list[list[float]]:
        """The key is (group, turn), or (group, step_keys[i][k]) when step keys are given (GiGPO anchors)."""
        adv_o = outcome_advantages(rewards, norm)
        values: list[float] = []
        keys: list[Hashable] = []
        for i in range(len(rewards.turn_rewards)):
            for k, ret in enumerate(self.returns_to_go(rewards, i)):
                key = rewards.step_keys[i][k] if rewards.step_keys is not None else k
                values.append(ret)
                keys.append((rewards.group_of(i), key))
        normed = iter(normalize_by_key(values, keys, norm))
        return [
            [self.episode_weight * adv_o[i] + self.step_weight * next(normed) for _ in turns]
            for i, turns in enumerate(rewards.turn_rewards)
        ]


def make_scheme(scheme: str, **settings: object) -> AdvantageScheme:
    """The registered scheme ``scheme`` with those of ``settings`` it declares; ConfigError if invalid."""
    cls = SCHEMES.get(scheme)
    given = {k: v for k, v in settings.items() if k in cls.model_fields and k != "kind"}
    try:
        return cls(**given)
    except ValidationError as exc:
        details = "; ".join(str(e["msg"]) for e in exc.errors())
        raise ConfigError(f"turn advantage scheme {scheme!r} settings {given} are invalid: {details}") from exc


def turn_advantages(
    scheme: Literal["outcome", "outcome_plus_turn", "discounted_return"],
    outcome_rewards: Sequence[float],
    turn_rewards: Sequence[Sequence[float | None]],
    group_size: int,
    *,
    eps: float = 1e-6,
    unbiased: bool = True,
    lam: float = 1.0,
    gamma: float = 1.0,
    episode_weight: float = 0.0,
    step_weight: float = 1.0,
    step_keys: Sequence[Sequence[Hashable]] | None = None,
) -> list[list[float]]:
    """One advantage per assistant turn of each episode, by the named scheme (docs/algorithm.md#per-turn-schemes).

    ``outcome_rewards`` are outcomes separate from the turn rewards (the spec's R_i); the trainer
    also passes outcomes that are the sum of the turn rewards, through ``RewardBatch``.
    """
    obj = make_scheme(scheme, lam=lam, gamma=gamma, episode_weight=episode_weight, step_weight=step_weight)
    rewards = RewardBatch(outcome_rewards, turn_rewards, group_size, step_keys=step_keys)
    return obj(rewards, Normalization(eps=eps, unbiased=unbiased))


def broadcast_turn_advantages(turn_ids: torch.Tensor, turn_adv: Sequence[Sequence[float]]) -> torch.Tensor:
    """Token t of row i gets turn_adv[i][turn_ids[i, t]] where turn_ids >= 0, else 0 (float32 [B, T])."""
    num_rows = turn_ids.shape[0]
    if len(turn_adv) != num_rows:
        raise ConfigError(f"turn_adv has {len(turn_adv)} rows but turn_ids has {num_rows}; pass one list per row")
    width = max([len(row) for row in turn_adv] + [1])
    table = torch.zeros(num_rows, width, dtype=torch.float32)
    for i, row in enumerate(turn_adv):
        if row:
            table[i, : len(row)] = torch.tensor([float(a) for a in row], dtype=torch.float32)
    ids = turn_ids.long().cpu()
    lengths = torch.tensor([len(row) for row in turn_adv])
    bad = (ids >= lengths[:, None]) & (ids >= 0)
    if bool(bad.any()):
        i, t = (int(x) for x in bad.nonzero()[0])
        raise ConfigError(
            f"row {i} token {t} has turn id {int(ids[i, t])} but only {len(turn_adv[i])} turn advantages; "
            "pass one advantage per assistant turn of the episode"
        )
    gathered = table.gather(1, ids.clamp(min=0))
    return torch.where(ids >= 0, gathered, 0.0).to(turn_ids.device)
