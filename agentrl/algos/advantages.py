"""Critic-free advantages (GSPO.md sections 2.2 and 3.2): group-normalised outcomes, per-turn schemes,
and their broadcast onto tokens.

Invariant: a group (or key) whose values are all equal gets exactly 0, without relying on eps.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from typing import Literal

import torch

from agentrl.errors import ConfigError, did_you_mean


def _check_group_size(num_rows: int, group_size: int) -> None:
    if group_size < 1 or num_rows % group_size != 0:
        raise ConfigError(
            f"group size {group_size} does not divide the batch of {num_rows} rows; groups are contiguous "
            f"blocks of group_size rows, so pass a batch of (number of groups) x {group_size} rows"
        )


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    *,
    eps: float = 1e-6,
    unbiased: bool = True,
    scale: Literal["std", "none"] = "std",
) -> torch.Tensor:
    """GRPO/GSPO advantages A_i = (r_i - mean_g) / (std_g + eps) over contiguous groups (eq. 6).

    NaN rewards are excluded from their group's statistics and get A = 0; a group with fewer
    than 2 valid rewards, or whose valid rewards are all equal, gets exactly 0.
    """
    if scale not in ("std", "none"):
        raise ConfigError(f"advantage scale {scale!r} is unknown; use 'std' or 'none'")
    _check_group_size(rewards.numel(), group_size)
    r = rewards.detach().to(torch.float64).reshape(-1, group_size)
    valid = ~torch.isnan(r)
    count = valid.sum(-1, keepdim=True)
    r0 = torch.where(valid, r, 0.0)
    mean = r0.sum(-1, keepdim=True) / count.clamp(min=1)
    centered = torch.where(valid, r - mean, 0.0)
    dof = (count - 1) if unbiased else count
    std = (centered.square().sum(-1, keepdim=True) / dof.clamp(min=1)).sqrt()
    adv = centered / (std + eps) if scale == "std" else centered
    # Exact zeros for degenerate groups: sum/count can round, so r - mean need not be exactly 0.
    lo = torch.where(valid, r, math.inf).amin(-1, keepdim=True)
    hi = torch.where(valid, r, -math.inf).amax(-1, keepdim=True)
    degenerate = (count < 2) | (lo == hi)
    adv = torch.where(valid & ~degenerate, adv, 0.0)
    return adv.reshape(rewards.shape).to(rewards.dtype if rewards.is_floating_point() else torch.float32)


def _normalize_by_key(values: Sequence[float], keys: Sequence[Hashable], eps: float, unbiased: bool) -> list[float]:
    """Norm_key(v) = (v - mean) / (std + eps) over entries sharing a key; < 2 members or all equal -> 0."""
    members: dict[Hashable, list[int]] = defaultdict(list)
    for index, key in enumerate(keys):
        members[key].append(index)
    out = [0.0] * len(values)
    for indices in members.values():
        vals = [float(values[i]) for i in indices]
        if len(vals) < 2 or min(vals) == max(vals):
            continue
        mean = sum(vals) / len(vals)
        var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1 if unbiased else len(vals))
        for i, v in zip(indices, vals):
            out[i] = (v - mean) / (math.sqrt(var) + eps)
    return out


def _outcome_advantages(outcome_rewards: Sequence[float], group_size: int, eps: float, unbiased: bool) -> list[float]:
    rewards = torch.tensor([math.nan if r is None else float(r) for r in outcome_rewards], dtype=torch.float64)
    return group_advantages(rewards, group_size, eps=eps, unbiased=unbiased).tolist()


def turn_adv_outcome(
    outcome_rewards: Sequence[float],
    turn_rewards: Sequence[Sequence[float | None]],
    group_size: int,
    *,
    eps: float,
    unbiased: bool,
    **_: object,
) -> list[list[float]]:
    """Scheme O: every turn of episode i gets the outcome advantage A^O_i (GSPO-token == GSPO)."""
    adv_o = _outcome_advantages(outcome_rewards, group_size, eps, unbiased)
    return [[adv_o[i]] * len(turns) for i, turns in enumerate(turn_rewards)]


def turn_adv_outcome_plus_turn(
    outcome_rewards: Sequence[float],
    turn_rewards: Sequence[Sequence[float | None]],
    group_size: int,
    *,
    eps: float,
    unbiased: bool,
    lam: float = 1.0,
    **_: object,
) -> list[list[float]]:
    """Scheme T (MT-GRPO generalised): A_ik = A^O_i + lam * Norm_(g,k)(r_ik); turns without reward get A^O_i."""
    adv_o = _outcome_advantages(outcome_rewards, group_size, eps, unbiased)
    flat_values: list[float] = []
    flat_keys: list[Hashable] = []
    slots: list[tuple[int, int]] = []
    for i, turns in enumerate(turn_rewards):
        for k, reward in enumerate(turns):
            if reward is not None and not math.isnan(reward):
                flat_values.append(float(reward))
                flat_keys.append((i // group_size, k))
                slots.append((i, k))
    normed = _normalize_by_key(flat_values, flat_keys, eps, unbiased)
    out = [[adv_o[i]] * len(turns) for i, turns in enumerate(turn_rewards)]
    for (i, k), value in zip(slots, normed):
        out[i][k] += lam * value
    return out


def turn_adv_discounted_return(
    outcome_rewards: Sequence[float],
    turn_rewards: Sequence[Sequence[float | None]],
    group_size: int,
    *,
    eps: float,
    unbiased: bool,
    gamma: float = 1.0,
    episode_weight: float = 0.0,
    step_weight: float = 1.0,
    step_keys: Sequence[Sequence[Hashable]] | None = None,
    **_: object,
) -> list[list[float]]:
    """Scheme R (GTPO / GiGPO-step): A_ik = alpha * A^O_i + omega * Norm_key(G_ik), G_ik the return-to-go.

    Rewards r~_ik are the turn rewards (None -> 0) with the outcome R_i added to the last turn;
    the key defaults to (group, turn) and is (group, step_keys[i][k]) when step keys are given.
    """
    adv_o = _outcome_advantages(outcome_rewards, group_size, eps, unbiased)
    flat_values: list[float] = []
    flat_keys: list[Hashable] = []
    for i, turns in enumerate(turn_rewards):
        shaped = [0.0 if r is None or math.isnan(r) else float(r) for r in turns]
        outcome = outcome_rewards[i]
        if shaped and outcome is not None and not math.isnan(outcome):
            shaped[-1] += float(outcome)
        returns = [0.0] * len(shaped)
        running = 0.0
        for k in range(len(shaped) - 1, -1, -1):
            running = shaped[k] + gamma * running
            returns[k] = running
        for k, ret in enumerate(returns):
            key = step_keys[i][k] if step_keys is not None else k
            flat_values.append(ret)
            flat_keys.append((i // group_size, key))
    normed = iter(_normalize_by_key(flat_values, flat_keys, eps, unbiased))
    return [
        [episode_weight * adv_o[i] + step_weight * next(normed) for _ in turns] for i, turns in enumerate(turn_rewards)
    ]


TURN_ADVANTAGE_SCHEMES: dict[str, Callable[..., list[list[float]]]] = {
    "outcome": turn_adv_outcome,
    "outcome_plus_turn": turn_adv_outcome_plus_turn,
    "discounted_return": turn_adv_discounted_return,
}


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
    """One advantage per assistant turn of each episode, by the named scheme (GSPO.md 3.2)."""
    if scheme not in TURN_ADVANTAGE_SCHEMES:
        raise ConfigError(
            f"turn advantage scheme {scheme!r} is unknown; choose one of {sorted(TURN_ADVANTAGE_SCHEMES)}."
            + did_you_mean(scheme, TURN_ADVANTAGE_SCHEMES)
        )
    if len(outcome_rewards) != len(turn_rewards):
        raise ConfigError(
            f"{len(outcome_rewards)} outcome rewards but {len(turn_rewards)} turn-reward lists; pass one of each per "
            "episode"
        )
    _check_group_size(len(outcome_rewards), group_size)
    if step_keys is not None and [len(k) for k in step_keys] != [len(t) for t in turn_rewards]:
        raise ConfigError("step_keys must hold one key per turn of each episode, shaped like turn_rewards")
    return TURN_ADVANTAGE_SCHEMES[scheme](
        outcome_rewards,
        turn_rewards,
        group_size,
        eps=eps,
        unbiased=unbiased,
        lam=lam,
        gamma=gamma,
        episode_weight=episode_weight,
        step_weight=step_weight,
        step_keys=step_keys,
    )


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
