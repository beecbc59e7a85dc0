"""Environments with the bugs a new user writes (importable as ``buggy_envs:Class``): each breaks the env
contract in one way. They have no task set, so the task stream is unbounded, as in a real first run."""

from __future__ import annotations

from typing import Any

from agentrl.env import MultiTurnEnv, StepResult, user


class _Quiz(MultiTurnEnv):
    max_turns = 2

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return [user("What is 2 + 2? Reply with the number.")], {}

    def step(self, action: str) -> Any:
        return [], 1.0, True, False, {"success": True}


class StepRaises(_Quiz):
    """``step`` raises (a bug in the grading code)."""

    def step(self, action: str) -> StepResult:
        raise KeyError("answer")


class StrObservation(_Quiz):
    """``reset`` returns the question as a str instead of a list of messages."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return "What is 2 + 2?", {}


class WrongTuple(_Quiz):
    """``step`` returns old gym's 4-tuple (messages, reward, done, info)."""

    def step(self, action: str) -> Any:
        return [], 1.0, True, {}


class Healthy(_Quiz):
    """The same quiz without a bug (the control)."""


class StepBlocks(_Quiz):
    """``step`` blocks for ever (it waits on something that never comes, like ``input()`` in a job)."""

    def step(self, action: str) -> StepResult:
        import threading

        threading.Event().wait()
        raise AssertionError("unreachable")
