"""Agent behaviour of finished episodes: turns used, testing before submitting, recovering from failures.

Env-agnostic: computed from each turn's ``info`` through these documented keys. An env that sets
none of them (no turn of the batch has ``info["action"]``) gets ``turns_mean`` only: the other
metrics would read 0 for an env they do not describe (and its plots would show a code agent's
behaviour panel for a text adventure):

* ``info["action"]``: ``"run"`` (code was executed, not graded as the answer), ``"submit"`` (the
  answer was graded), anything else (the turn had no usable code, e.g. ``"none"``, ``"invalid"``);
* ``info["run_failed"]`` (run turns): the code raised, timed out, or failed a check it was run
  against (visible examples); without it, ``info["code_ran"] is False`` counts as a failure;
* ``info["success"]`` (last turn): the episode solved its task;
* ``info["tool_calls"]``, ``info["tool_errors"]`` (turns of a tool env): calls made, and how many were
  malformed or failed; they give ``valid_tool_call_frac``.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from agentrl.trajectory import Episode

BEHAVIOUR_METRICS = (
    "turns_mean",
    "code_turn_frac",
    "tested_before_submit_frac",
    "failed_run_frac",
    "recovery_frac",
    "valid_tool_call_frac",
)


def _failed(info: dict[str, Any]) -> bool:
    if "run_failed" in info:
        return bool(info["run_failed"])
    return info.get("code_ran") is False


def had_failed_run(episode: Episode) -> bool:
    """The episode ran code that failed (raised, timed out or failed its visible checks) on some turn; with a
    successful last turn, it recovered after a failed run."""
    return any(t.info.get("action") == "run" and _failed(t.info) for t in episode.turns)


def behaviour_metrics(episodes: Iterable[Episode]) -> dict[str, float]:
    """Means over episodes (``recovery_frac`` over those with a failed run; 0 when there are none).

    * ``turns_mean``: assistant turns per episode;
    * ``code_turn_frac``: fraction of turns that ran or submitted code (format compliance);
    * ``tested_before_submit_frac``: episodes that ran code at least once before their last turn;
    * ``failed_run_frac``: episodes with at least one failed run;
    * ``recovery_frac``: episodes with a failed run that still ended in success;
    * ``valid_tool_call_frac`` (only when some turn reports ``tool_calls``): calls that ran, over all calls.
    """
    finished = [e for e in episodes if e.turns]
    if not finished:
        return {}
    turns = [len(e.turns) for e in finished]
    actions = [[t.info.get("action") for t in e.turns] for e in finished]
    if not any("action" in t.info for e in finished for t in e.turns):
        return {"turns_mean": statistics.fmean(turns)}  # the env reports no actions: nothing else is measured
    code_turns = sum(a in ("run", "submit") for acts in actions for a in acts)
    tested = sum("run" in acts[:-1] for acts in actions)
    failed = [e for e in finished if had_failed_run(e)]
    recovered = sum(bool(e.turns[-1].info.get("success")) for e in failed)
    metrics = {
        "turns_mean": statistics.fmean(turns),
        "code_turn_frac": code_turns / sum(turns),
        "tested_before_submit_frac": tested / len(finished),
        "failed_run_frac": len(failed) / len(finished),
        "recovery_frac": recovered / len(failed) if failed else 0.0,
    }
    calls = sum(int(t.info.get("tool_calls", 0)) for e in finished for t in e.turns)
    if calls:
        errors = sum(int(t.info.get("tool_errors", 0)) for e in finished for t in e.turns)
        metrics["valid_tool_call_frac"] = 1.0 - errors / calls
    return metrics
