"""The advantage-scheme plug-in point: ``AdvantageScheme``, the rewards it reads, group normalisation, registry.

Reward semantics (docs/algorithm.md#rewards-the-schemes-read, the env contract in ``agentrl.env``): episode i
has per-turn rewards r_ik and an outcome R_i. The outcome is either *separate* (the env set ``info["outcome"]``;
the turn rewards are not part of it) or the episode's *return* (no outcome from the env:
R_i = sum_k r_ik). A scheme that adds the outcome to the turn rewards adds only a separate one.

Invariant: a group (or key) whose values are all equal gets exactly 0, without relying on eps.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from agentrl.config.plugins import PluginRegistry, PluginSettings
from agentrl.config.problems import Problem
from agentrl.errors import ConfigError

Scale = Literal["std", "none"]


def check_group_size(num_rows: int, group_size: int) -> None:
    """ConfigError unless the rows split into contiguous groups of ``group_size``."""
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
    check_group_size(rewards.numel(), group_size)
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


@dataclass(frozen=True)
class Normalization:
    """How values are normalised within a group or key: (v - mean) / (std + eps), or centred only (scale none)."""

    eps: float = 1e-6
    unbiased: bool = True
    scale: Scale = "std"


@dataclass(frozen=True)
class RewardBatch:
    """The rewards every scheme reads, for episodes in contiguous groups of ``group_size``.

    ``outcomes[i]`` is R_i (NaN or None: unscorable, advantage 0); ``turn_rewards[i][k]`` is r_ik
    (None: the turn has no reward). ``separate_outcome[i]`` is False when R_i is the sum of the turn
    rewards rather than a reward of its own (None: every outcome is separate, as in docs/algorithm.md#per-turn-schemes).
    ``step_keys[i][k]`` optionally names the state before turn k (GiGPO anchor groups).
    """

    outcomes: Sequence[float | None]
    turn_rewards: Sequence[Sequence[float | None]]
    group_size: int
    separate_outcome: Sequence[bool] | None = None
    step_keys: Sequence[Sequence[Hashable]] | None = None

    def check(self) -> None:
        """ConfigError when the lists do not describe the same episodes in whole groups."""
        if len(self.outcomes) != len(self.turn_rewards):
            raise ConfigError(
                f"{len(self.outcomes)} outcome rewards but {len(self.turn_rewards)} turn-reward lists; pass one of "
                "each per episode"
            )
        check_group_size(len(self.outcomes), self.group_size)
        if self.separate_outcome is not None and len(self.separate_outcome) != len(self.outcomes):
            raise ConfigError("separate_outcome must hold one flag per episode")
        if self.step_keys is not None and [len(k) for k in self.step_keys] != [len(t) for t in self.turn_rewards]:
            raise ConfigError("step_keys must hold one key per turn of each episode, shaped like turn_rewards")

    def is_separate(self, i: int) -> bool:
        """True when episode i's outcome is a reward of its own, not the sum of its turn rewards."""
        return True if self.separate_outcome is None else bool(self.separate_outcome[i])

    def outcome(self, i: int) -> float | None:
        """R_i as a float, or None when unscorable."""
        value = self.outcomes[i]
        return None if value is None or math.isnan(value) else float(value)

    def group_of(self, i: int) -> int:
        """Index of episode i's group."""
        return i // self.group_size


def outcome_advantages(rewards: RewardBatch, norm: Normalization) -> list[float]:
    """A^O_i: the group-normalised outcome of each episode (docs/algorithm.md#advantages)."""
    values = [math.nan if rewards.outcome(i) is None else rewards.outcome(i) for i in range(len(rewards.outcomes))]
    tensor = torch.tensor(values, dtype=torch.float64)
    return group_advantages(tensor, rewards.group_size, eps=norm.eps, unbiased=norm.unbiased, scale=norm.scale).tolist()


def normalize_by_key(values: Sequence[float], keys: Sequence[Hashable], norm: Normalization) -> list[float]:
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
        var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1 if norm.unbiased else len(vals))
        for i, v in zip(indices, vals):
            out[i] = (v - mean) / (math.sqrt(var) + norm.eps)
    return out


class AdvantageScheme(PluginSettings):
    """A registered advantage scheme: its fields are its settings; ``advantages`` gives one value per turn.

    Subclasses declare ``kind`` (a Literal with a default), override ``advantages``, and may set
    ``per_turn`` (False when every turn of an episode gets the same advantage, so sequence-level
    losses accept it), ``scales`` (the ``algorithm.adv_scale`` values it implements) and ``problems``.
    """

    per_turn: ClassVar[bool] = True
    scales: ClassVar[tuple[str, ...]] = ("std",)

    @abstractmethod
    def advantages(self, rewards: RewardBatch, norm: Normalization) -> list[list[float]]:
        """One list per episode with one advantage per turn (``len(rewards.turn_rewards[i])`` values)."""

    def problems(self, algo: Any) -> list[Problem]:
        """Problems of this scheme combined with ``algo``, the validated ``AlgorithmConfig`` (empty: fine)."""
        if algo.adv_scale not in self.scales:
            return [
                Problem(
                    "algorithm.adv_scale",
                    f"adv_scale {algo.adv_scale!r} is not implemented by turn_advantage {self.kind!r} "
                    f"(it supports {', '.join(self.scales)})",
                    f"set algorithm.adv_scale: {self.scales[0]}, or a turn_advantage that supports it",
                )
            ]
        return []

    def __call__(self, rewards: RewardBatch, norm: Normalization = Normalization()) -> list[list[float]]:
        """Check the inputs and the scale, then compute ``advantages``."""
        rewards.check()
        if norm.scale not in self.scales:
            raise ConfigError(
                f"turn_advantage {self.kind!r} does not implement adv_scale {norm.scale!r}; use one of {self.scales}"
            )
        return self.advantages(rewards, norm)


SCHEMES: PluginRegistry[AdvantageScheme] = PluginRegistry(
    "advantage scheme", "algorithm.turn_advantage", AdvantageScheme, "agentrl.algos.register_scheme"
)


def register_scheme(cls: type[AdvantageScheme]) -> type[AdvantageScheme]:
    """Register an ``AdvantageScheme`` subclass under its ``kind`` (usable as a decorator); returns the class."""
    return SCHEMES.register(cls)
