"""Golden values and edge cases of the advantage schemes (docs/algorithm.md#advantages, #per-turn-schemes)."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.algos import (
    DiscountedReturn,
    Normalization,
    Outcome,
    OutcomePlusTurn,
    RewardBatch,
    TurnCreditWarning,
    broadcast_turn_advantages,
    group_advantages,
    turn_advantages,
)
from agentrl.errors import ConfigError


def test_group_advantages_golden_unbiased() -> None:
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    adv = group_advantages(rewards, 4, eps=0.0)
    # group 1: mean 0.75, Bessel std 0.5; group 2: mean 0.25, Bessel std 0.5
    assert adv.tolist() == pytest.approx([0.5, -1.5, 0.5, 0.5, -0.5, -0.5, -0.5, 1.5], abs=1e-6)


def test_group_advantages_biased_and_unscaled() -> None:
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    biased = group_advantages(rewards, 4, eps=0.0, unbiased=False)
    assert biased.tolist() == pytest.approx(
        [0.25 / math.sqrt(0.1875), -0.75 / math.sqrt(0.1875)] + [0.25 / math.sqrt(0.1875)] * 2, abs=1e-6
    )
    unscaled = group_advantages(rewards, 4, scale="none")
    assert unscaled.tolist() == pytest.approx([0.25, -0.75, 0.25, 0.25])


def test_equal_rewards_give_exact_zero_without_eps() -> None:
    rewards = torch.tensor([0.1, 0.1, 0.1, 0.7, 0.7, 0.7], dtype=torch.float64)
    adv = group_advantages(rewards, 3, eps=0.0)
    assert torch.equal(adv, torch.zeros(6, dtype=torch.float64))
    assert group_advantages(torch.tensor([3.0, -2.0]), 1).tolist() == [0.0, 0.0]  # G = 1 -> 0


def test_nan_reward_is_excluded_and_gets_zero() -> None:
    adv = group_advantages(torch.tensor([1.0, float("nan"), 0.0, 0.0]), 4, eps=0.0)
    std = math.sqrt(1 / 3)
    assert adv.tolist() == pytest.approx([(2 / 3) / std, 0.0, -(1 / 3) / std, -(1 / 3) / std], abs=1e-6)


def test_group_size_must_divide_batch() -> None:
    with pytest.raises(ConfigError, match="group size 3 does not divide the batch of 4 rows"):
        group_advantages(torch.zeros(4), 3)


def test_outcome_scheme_repeats_episode_advantage_per_turn() -> None:
    out = turn_advantages("outcome", [1.0, 0.0], [[None, None, None], [0.5]], 2, eps=0.0)
    s = math.sqrt(0.5)
    assert out == [pytest.approx([0.5 / s] * 3), pytest.approx([-0.5 / s])]


def test_outcome_plus_turn_golden() -> None:
    # one group of 2; turn 0 rewards 1 vs 0 -> Norm = +-0.7071; turn 1 only episode 0 has one -> 0
    out = turn_advantages("outcome_plus_turn", [1.0, 0.0], [[1.0, 0.3], [0.0, None]], 2, eps=0.0, lam=2.0)
    s = math.sqrt(0.5)
    a_o = 0.5 / s
    assert out[0] == pytest.approx([a_o + 2.0 * a_o, a_o])
    assert out[1] == pytest.approx([-a_o - 2.0 * a_o, -a_o])


def test_discounted_return_golden() -> None:
    # episode 0: turn rewards [0, 1], outcome 1 -> shaped [0, 2]; gamma 0.5 -> G = [1, 2]
    # episode 1: turn rewards [None, 0], outcome 0 -> shaped [0, 0] -> G = [0, 0]
    out = turn_advantages("discounted_return", [1.0, 0.0], [[0.0, 1.0], [None, 0.0]], 2, eps=0.0, gamma=0.5)
    # key (g, k): turn 0 values {1, 0} -> +-0.7071; turn 1 values {2, 0} -> +-0.7071
    s = 1 / math.sqrt(2)
    assert out == [pytest.approx([s, s]), pytest.approx([-s, -s])]
    mixed = turn_advantages(
        "discounted_return",
        [1.0, 0.0],
        [[0.0, 1.0], [None, 0.0]],
        2,
        eps=0.0,
        gamma=0.5,
        episode_weight=1.0,
        step_weight=0.5,
    )
    a_o = 0.5 / math.sqrt(0.5)
    assert mixed[0] == pytest.approx([a_o + 0.5 * s, a_o + 0.5 * s])


def test_discounted_return_anchor_keys() -> None:
    # GiGPO anchors: only turns sharing a state key are compared; a singleton key gives 0
    out = turn_advantages(
        "discounted_return", [1.0, 0.0], [[0.0, 0.0], [0.0]], 2, eps=0.0, step_keys=[["s0", "s1"], ["s0"]]
    )
    s = 1 / math.sqrt(2)
    assert out == [pytest.approx([s, 0.0]), pytest.approx([-s])]


def test_unknown_scheme_suggests_name() -> None:
    with pytest.raises(ConfigError, match="Did you mean 'outcome_plus_turn'"):
        turn_advantages("outcome_plus_turns", [1.0], [[1.0]], 1)  # type: ignore[arg-type]


def test_broadcast_turn_advantages() -> None:
    turn_ids = torch.tensor([[-1, 0, 0, -1, 1, 1], [-1, 0, -1, -1, -1, -1]])
    out = broadcast_turn_advantages(turn_ids, [[0.5, -2.0], [3.0]])
    assert out.tolist() == [[0.0, 0.5, 0.5, 0.0, -2.0, -2.0], [0.0, 3.0, 0.0, 0.0, 0.0, 0.0]]
    with pytest.raises(ConfigError, match="turn id 1 but only 1 turn advantages"):
        broadcast_turn_advantages(torch.tensor([[0, 1]]), [[1.0]])


def test_discounted_return_adds_only_a_separate_outcome() -> None:
    """Issue 12: an outcome that is the sum of the turn rewards must not be added to the last turn again."""
    turn_rewards = [[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    returns = [1.0, 0.0, 0.0]  # R_i = sum of the turn rewards: the env set no outcome of its own
    scheme = DiscountedReturn(gamma=1.0)
    adv = scheme(RewardBatch(returns, turn_rewards, 3, separate_outcome=[False] * 3), Normalization(eps=0.0))
    turn0 = [2 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)]  # G_i0 = [1, 0, 0]
    assert [a[0] for a in adv] == pytest.approx(turn0)
    assert [a[1] for a in adv] == [0.0, 0.0, 0.0]  # every turn-1 return-to-go is 0 (was [1.15, -0.58, -0.58])
    # a separate outcome (the env's own verdict) is a reward of the last turn, so turn 1 gets credit for it
    separate = scheme(RewardBatch([1.0, 0.0, 0.0], turn_rewards, 3), Normalization(eps=0.0))
    assert [a[1] for a in separate] == pytest.approx(turn0)
    assert turn_advantages("discounted_return", [1.0, 0.0, 0.0], turn_rewards, 3, eps=0.0) == separate


def test_outcome_scheme_applies_adv_scale_itself() -> None:
    rewards = RewardBatch([1.0, 0.0, 1.0, 1.0], [[None], [None, None], [None], [None]], 4)
    assert Outcome()(rewards, Normalization(scale="none")) == [[0.25], [-0.75, -0.75], [0.25], [0.25]]
    with pytest.raises(ConfigError, match="does not implement adv_scale 'none'"):
        DiscountedReturn()(rewards, Normalization(scale="none"))


def test_outcome_plus_turn_counts_a_return_outcome_once() -> None:
    """Issue 31.3: with no separate outcome R_i = sum_k r_ik is in A^O_i; a turn term would count each r_ik twice."""
    turn_rewards = [[1.0, 0.0], [0.0, 0.0], [0.0, 0.5]]
    returns = [1.0, 0.0, 0.5]  # the env set no info["outcome"]: R_i is the return
    scheme, norm = OutcomePlusTurn(lam=1.0), Normalization(eps=0.0)
    outcome = Outcome()(RewardBatch(returns, turn_rewards, 3, separate_outcome=[False] * 3), norm)
    with pytest.warns(TurnCreditWarning, match="3 of 3 episodes have no separate outcome.*info\\['outcome'\\]"):
        adv = scheme(RewardBatch(returns, turn_rewards, 3, separate_outcome=[False] * 3), norm)
    assert adv == outcome  # each turn reward once, in A^O (the turn term added [1.15, -0.58, -0.58] to turn 0)
    # mixed: episode 0's outcome is its own; only the separate episodes' turn rewards form the (g, k) statistics
    outcomes = [1.0, 0.0, 0.0, 1.0, 0.0, 0.5]
    turns = [[1.0], [0.0], [0.0], [1.0], [0.0], [0.5]]
    separate = [True, True, False, True, True, False]
    with pytest.warns(TurnCreditWarning, match="2 of 6 episodes"):
        mixed = scheme(RewardBatch(outcomes, turns, 3, separate_outcome=separate), norm)
    a_o = Outcome()(RewardBatch(outcomes, turns, 3, separate_outcome=separate), norm)
    s = 1 / math.sqrt(2)  # turn 0 of group 0: {1, 0} among the separate episodes; group 1: {1, 0}
    assert mixed == [
        pytest.approx([a_o[0][0] + s]),
        pytest.approx([a_o[1][0] - s]),
        a_o[2],
        pytest.approx([a_o[3][0] + s]),
        pytest.approx([a_o[4][0] - s]),
        a_o[5],
    ]
