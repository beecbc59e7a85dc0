"""Agent behaviour metrics from documented info keys, and how the held-out summary prints them."""

from __future__ import annotations

from typing import Any

import pytest

from agentrl.evaluation.behaviour import behaviour_metrics
from agentrl.trainer.heldout import summary_lines
from agentrl.trajectory import Episode, TurnRecord


def episode(*infos: dict[str, Any]) -> Episode:
    turns = [TurnRecord(index=i, reward=0.0, info=info) for i, info in enumerate(infos)]
    return Episode(episode_id="e", task_id="t", group_id="g", turns=turns, status="complete")


RUN_OK = {"action": "run", "run_failed": False}
RUN_FAILED = {"action": "run", "run_failed": True}
SOLVED = {"action": "submit", "success": True}
FAILED = {"action": "submit", "success": False}


def test_turns_testing_failures_and_recovery() -> None:
    episodes = [
        episode(SOLVED),  # one-shot solve: never tested first
        episode(RUN_FAILED, SOLVED),  # failed run, then fixed: a recovery
        episode(RUN_FAILED, {"action": "none"}, FAILED),  # failed run, never recovered; one turn without code
        episode(RUN_OK, FAILED),  # tested, no failure, wrong anyway
    ]
    metrics = behaviour_metrics(episodes)
    assert metrics == {
        "turns_mean": pytest.approx(2.0),
        "code_turn_frac": pytest.approx(7 / 8),
        "tested_before_submit_frac": pytest.approx(3 / 4),
        "failed_run_frac": pytest.approx(2 / 4),
        "recovery_frac": pytest.approx(1 / 2),
    }


def test_code_ran_is_the_fallback_failure_signal_and_empty_input_gives_nothing() -> None:
    # CodeExec-v0 reports code_ran on its run turns, not run_failed.
    metrics = behaviour_metrics([episode({"action": "run", "code_ran": False}, SOLVED)])
    assert metrics["failed_run_frac"] == 1.0 and metrics["recovery_frac"] == 1.0
    assert behaviour_metrics([]) == {}
    assert behaviour_metrics([episode(SOLVED)])["recovery_frac"] == 0.0  # no failed run: nothing to recover from


def test_heldout_summary_shows_behaviour_only_for_multi_turn_runs() -> None:
    before = {"eval/t/pass@1": 0.25, "eval/t/turns_mean": 2.5, "eval/t/tested_before_submit_frac": 0.5}
    after = {"eval/t/pass@1": 0.5, "eval/t/turns_mean": 2.0, "eval/t/tested_before_submit_frac": 0.75}
    assert summary_lines(before, after) == [
        "held-out t pass@1: 0.25 -> 0.50 (+0.25)",
        "  behaviour t: turns 2.50 -> 2.00, tested before submit 0.50 -> 0.75",
    ]
    single = {"eval/t/pass@1": 0.25, "eval/t/turns_mean": 1.0}
    assert summary_lines(single, {**single, "eval/t/pass@1": 0.5}) == ["held-out t pass@1: 0.25 -> 0.50 (+0.25)"]


def test_an_env_that_reports_no_actions_gets_only_turns() -> None:
    """A text adventure's episodes are not a code agent's: its behaviour panel would read 0 everywhere."""
    assert behaviour_metrics([episode({}, {"success": True}), episode({})]) == {"turns_mean": pytest.approx(1.5)}


def test_valid_tool_call_rate_counts_calls_not_turns_and_only_for_tool_envs() -> None:
    calls_ok = {"action": "run", "run_failed": False, "tool_calls": 2, "tool_errors": 0}
    one_bad = {"action": "run", "run_failed": True, "tool_calls": 2, "tool_errors": 1}
    metrics = behaviour_metrics([episode(calls_ok, SOLVED), episode(one_bad, calls_ok, FAILED)])
    assert metrics["valid_tool_call_frac"] == pytest.approx(5 / 6)
    assert "valid_tool_call_frac" not in behaviour_metrics([episode(RUN_OK, SOLVED)])  # a code env makes no calls
