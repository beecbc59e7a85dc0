"""pass@k estimator against hand-computed values and brute-force enumeration."""

from __future__ import annotations

import itertools
from math import comb

import pytest

from agentrl.errors import ConfigError
from agentrl.evaluation import TaskResult, pass_at_k, summarize


def test_pass_at_k_hand_values() -> None:
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 4, 4) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - comb(3, 2) / comb(5, 2))  # 0.7
    assert pass_at_k(10, 8, 3) == 1.0  # fewer than k failures: every k-subset has a success


def test_pass_at_k_matches_subset_enumeration() -> None:
    flags = [True, False, False, True, False, False]
    for k in range(1, len(flags) + 1):
        subsets = list(itertools.combinations(flags, k))
        expected = sum(any(s) for s in subsets) / len(subsets)
        assert pass_at_k(len(flags), sum(flags), k) == pytest.approx(expected)


def test_summary_averages_tasks_and_checks_k() -> None:
    results = [TaskResult("a", [True, True], [1.0, 1.0]), TaskResult("b", [False, True], [0.0, 1.0])]
    report = summarize(results, [1, 2], samples=2)
    assert report.pass_at_k == {"1": pytest.approx(0.75), "2": 1.0}
    assert report.mean_reward == pytest.approx(0.75)
    with pytest.raises(ConfigError, match="at least 5 samples"):
        summarize(results, [5], samples=2)
    with pytest.raises(ConfigError):
        pass_at_k(2, 3, 1)
