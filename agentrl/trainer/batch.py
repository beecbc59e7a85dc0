"""Episodes -> trainer rows -> token-budget micro-batches of right-padded tensors.

Invariant: a row's position t predicts ``input_ids[t + 1]``; its ``logp_old``/``mask``/``adv``
arrays have length ``len(input_ids) - 1`` and the completion token at position P + j sits at
index P + j - 1, holding the engine's logprob of exactly that token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from agentrl.algos import turn_advantages
from agentrl.config.sections import AlgorithmConfig
from agentrl.errors import ConfigError
from agentrl.trajectory import Episode, TokenSegment


@dataclass
class TrainRow:
    """One token segment of one episode, aligned for next-token logprobs."""

    input_ids: list[int]
    logp_old: list[float]
    mask: list[bool]
    turn_ids: list[int]
    adv: list[float]
    episode_index: int
    stale_tokens: int = 0

    @property
    def length(self) -> int:
        """Tokens the forward pass sees."""
        return len(self.input_ids)

    @property
    def trainable(self) -> bool:
        """False when no masked token has a non-zero advantage: such a row gives exactly zero gradient."""
        return any(m and a != 0.0 for m, a in zip(self.mask, self.adv))


@dataclass
class MicroBatch:
    """Right-padded tensors of a few rows; causal attention makes right padding invisible to real tokens."""

    input_ids: torch.Tensor  # [b, L] long
    logp_old: torch.Tensor  # [b, L-1] fp32
    mask: torch.Tensor  # [b, L-1] bool
    adv: torch.Tensor  # [b, L-1] fp32
    turn_ids: torch.Tensor  # [b, L-1] long, -1 off-turn
    rows: list[TrainRow] = field(default_factory=list)

    @property
    def targets(self) -> torch.Tensor:
        """Token ids predicted at each position: input_ids shifted left by one."""
        return self.input_ids[:, 1:]

    def to(self, device: torch.device | str) -> MicroBatch:
        """The same micro-batch on ``device``."""
        return MicroBatch(
            self.input_ids.to(device),
            self.logp_old.to(device),
            self.mask.to(device),
            self.adv.to(device),
            self.turn_ids.to(device),
            self.rows,
        )


def segment_row(
    segment: TokenSegment,
    turn_adv: Sequence[float],
    episode_index: int,
    current_version: int,
    max_token_lag: int | None,
) -> TrainRow:
    """Align one segment: shift its completion arrays onto next-token positions; mask stale tokens."""
    ids = segment.input_ids
    n_prompt = len(segment.prompt_ids)
    width = max(len(ids) - 1, 0)
    logp = [0.0] * width
    mask = [False] * width
    turns = [-1] * width
    adv = [0.0] * width
    stale = 0
    for j, (lp, m, k, v) in enumerate(zip(segment.logprobs, segment.loss_mask, segment.turn_ids, segment.versions)):
        pos = n_prompt + j - 1
        if pos < 0 or not m or k < 0:
            continue  # the very first token of an empty prompt has no context to be predicted from
        if max_token_lag is not None and current_version - v > max_token_lag:
            stale += 1
            continue
        logp[pos], mask[pos], turns[pos], adv[pos] = float(lp), True, k, float(turn_adv[k])
    return TrainRow(list(ids), logp, mask, turns, adv, episode_index, stale)


def _turn_count(episode: Episode) -> int:
    max_turn = max((k for s in episode.segments for k in s.turn_ids), default=-1)
    return max(len(episode.turns), max_turn + 1)


def build_rows(
    groups: Sequence[Sequence[Episode]], group_size: int, algo: AlgorithmConfig, current_version: int
) -> list[TrainRow]:
    """Per-turn advantages for every group (GSPO.md 3.2), then one row per token segment."""
    episodes: list[Episode] = []
    for index, group in enumerate(groups):
        if len(group) != group_size:
            raise ConfigError(
                f"group {index} has {len(group)} episodes but rollout.group_size is {group_size}; "
                "the rollout must hand the trainer complete groups"
            )
        episodes.extend(group)
    turn_rewards: list[list[float | None]] = []
    for ep in episodes:
        rewards = list(ep.turn_rewards)
        turn_rewards.append(rewards + [None] * (_turn_count(ep) - len(rewards)))
    outcomes = [float("nan") if ep.final_reward is None else float(ep.final_reward) for ep in episodes]
    turn_adv = turn_advantages(
        algo.turn_advantage,
        outcomes,
        turn_rewards,
        group_size,
        eps=algo.adv_eps,
        lam=algo.lam,
        gamma=algo.gamma,
        episode_weight=algo.episode_weight,
        step_weight=algo.step_weight,
    )
    if algo.adv_scale == "none":
        turn_adv = _unscaled(algo, outcomes, turn_rewards, group_size, turn_adv)
    return [
        segment_row(seg, turn_adv[i], i, current_version, algo.max_token_lag)
        for i, ep in enumerate(episodes)
        for seg in ep.segments
    ]


def _unscaled(
    algo: AlgorithmConfig,
    outcomes: list[float],
    turn_rewards: list[list[float | None]],
    group_size: int,
    turn_adv: list[list[float]],
) -> list[list[float]]:
    """Dr-GRPO (adv_scale none) is defined for the outcome scheme only; validated in the run config."""
    from agentrl.algos import group_advantages

    adv = group_advantages(torch.tensor(outcomes, dtype=torch.float64), group_size, scale="none").tolist()
    return [[adv[i]] * len(turns) for i, turns in enumerate(turn_adv)]


def split_mini_batches(rows: list[TrainRow], num: int) -> list[list[TrainRow]]:
    """Contiguous, equal-sized slices (whole rows); the caller validated that num divides the rows."""
    if num < 1 or len(rows) % num != 0:
        raise ConfigError(
            f"{len(rows)} rows do not split into {num} equal mini-batches; make "
            "rollout.prompts_per_step * rollout.group_size divisible by trainer.mini_batches"
        )
    size = len(rows) // num
    return [rows[i * size : (i + 1) * size] for i in range(num)]


def pack_micro_batches(rows: Sequence[TrainRow], token_budget: int) -> list[MicroBatch]:
    """First-fit by decreasing length so each micro-batch holds <= token_budget padded tokens.

    Sorting by length keeps padding to the few tokens between neighbouring lengths; a row longer
    than the budget gets a micro-batch of its own.
    """
    order = sorted(range(len(rows)), key=lambda i: (-rows[i].length, i))
    bins: list[list[TrainRow]] = []
    for i in order:
        row = rows[i]
        if bins and (len(bins[-1]) + 1) * bins[-1][0].length <= token_budget:
            bins[-1].append(row)
        else:
            bins.append([row])
    return [collate(b) for b in bins]


def collate(rows: Sequence[TrainRow], pad_id: int = 0) -> MicroBatch:
    """Right-pad rows into tensors (padding has mask False, so its values never matter)."""
    length = max(r.length for r in rows)
    b = len(rows)
    input_ids = torch.full((b, length), pad_id, dtype=torch.long)
    logp_old = torch.zeros(b, length - 1)
    mask = torch.zeros(b, length - 1, dtype=torch.bool)
    adv = torch.zeros(b, length - 1)
    turn_ids = torch.full((b, length - 1), -1, dtype=torch.long)
    for i, r in enumerate(rows):
        n = r.length
        input_ids[i, :n] = torch.tensor(r.input_ids, dtype=torch.long)
        if n > 1:
            logp_old[i, : n - 1] = torch.tensor(r.logp_old, dtype=torch.float32)
            mask[i, : n - 1] = torch.tensor(r.mask, dtype=torch.bool)
            adv[i, : n - 1] = torch.tensor(r.adv, dtype=torch.float32)
            turn_ids[i, : n - 1] = torch.tensor(r.turn_ids, dtype=torch.long)
    return MicroBatch(input_ids, logp_old, mask, adv, turn_ids, list(rows))
