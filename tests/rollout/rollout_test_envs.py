"""Small deterministic environments for the rollout tests (importable as ``rollout_test_envs:Class``).

``Scratchpad`` is the code-execution-style env: each action "executes a cell" that sets a variable
from the action text, so its state depends on every action so far (replay must reproduce it).
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

from agentrl.env import MultiTurnEnv, StepResult, user


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


class Scratchpad(MultiTurnEnv):
    """A python-like REPL: turn k sets ``v{k}`` from the action; replayable; optional step hooks."""

    max_turns = 3

    def __init__(
        self,
        num_tasks: int = 6,
        turns: int = 3,
        step_sleep_s: float = 0.0,
        marker_dir: str | None = None,
        reply_tokens: int | None = None,
        long_tasks: tuple[str, ...] = (),
        long_reply_tokens: int = 0,
        long_turns: int | None = None,
        long_from_turn: int = 0,
    ) -> None:
        self.num_tasks, self.turns, self.step_sleep_s = num_tasks, turns, step_sleep_s
        # Long tasks may also take more turns: the short groups then finish while every long episode
        # is still mid-way (whatever the machine's load), which is what the partial-rollout tests need.
        self.long_turns = long_turns or turns
        self.long_from_turn = long_from_turn
        self.max_turns = max(turns, self.long_turns)
        self.marker_dir = Path(marker_dir) if marker_dir else None
        self.reply_tokens, self.long_tasks, self.long_reply_tokens = reply_tokens, tuple(long_tasks), long_reply_tokens
        self.vars: dict[str, str] = {}
        self.task = ""
        self.steps_taken = 0

    def task_ids(self) -> list[str]:
        return [f"task-{i}" for i in range(self.num_tasks)]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        super().reset(seed=seed)
        self.task = (options or {}).get("task_id", "task-?")
        self.vars = {"seed": str(seed)}
        self.steps_taken = 0
        return [user(f"Task {self.task}: write code.")], self._cap()

    def _cap(self) -> dict[str, Any]:
        """Reply length of this task's next turn: long tasks make the heavy tail partial rollouts cut.

        With ``long_from_turn=1`` a long task's first turn is as short as the others', so when the short
        groups complete every long episode has stepped once and is mid-way through a long reply,
        whatever the machine's load.
        """
        long = self.task in self.long_tasks and self.steps_taken >= self.long_from_turn
        tokens = self.long_reply_tokens if long else self.reply_tokens
        return {"max_new_tokens": tokens} if tokens else {}

    def step(self, action: str) -> StepResult:
        if self.step_sleep_s:
            time.sleep(self.step_sleep_s)
        before = dict(self.vars)
        self.vars[f"v{self.steps_taken}"] = _digest(action + self.vars["seed"])
        self.steps_taken += 1
        if self.marker_dir is not None:
            (self.marker_dir / f"{os.getpid()}-{uuid.uuid4().hex}").touch()
        done = self.steps_taken >= (self.long_turns if self.task in self.long_tasks else self.turns)
        reward = float(len(action) % 3 == 0)
        info = {"vars_before": before, "vars_after": dict(self.vars), "sandbox_time_s": 0.001, **self._cap()}
        return (
            [user(f">>> v{self.steps_taken - 1} = {self.vars[f'v{self.steps_taken - 1}']!r}")],
            reward,
            done,
            False,
            info,
        )


class SnapshotScratchpad(Scratchpad):
    """Not replayable, but restorable from ``snapshot()``."""

    replayable = False

    def snapshot(self) -> Any:
        return {"vars": self.vars, "steps": self.steps_taken, "task": self.task}

    def restore(self, snapshot: Any) -> None:
        self.vars, self.steps_taken, self.task = dict(snapshot["vars"]), int(snapshot["steps"]), snapshot["task"]


class OpaqueScratchpad(Scratchpad):
    """Neither replayable nor snapshottable: a partial episode restarts from scratch after a reload."""

    replayable = False


class NoisyScratchpad(Scratchpad):
    """Claims to be replayable but is not: its replies carry a random id (replay must notice)."""

    def step(self, action: str) -> StepResult:
        messages, reward, terminated, truncated, info = super().step(action)
        return [user(f"{messages[0]['content']} #{uuid.uuid4().hex[:6]}")], reward, terminated, truncated, info


class FlakyScratchpad(Scratchpad):
    """Raises in ``step`` for task ids listed in ``fail_tasks``."""

    def __init__(self, fail_tasks: tuple[str, ...] = ("task-1",), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail_tasks = tuple(fail_tasks)

    def step(self, action: str) -> StepResult:
        if self.task in self.fail_tasks:
            raise RuntimeError(f"sandbox crashed on {self.task}")
        return super().step(action)


class AsyncScratchpad(Scratchpad):
    """Offers async variants; the blocking ones raise, so a run proves the rollout awaited ``areset``/``astep``."""

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return Scratchpad.reset(self, seed=seed, options=options)

    async def astep(self, action: str) -> StepResult:
        return Scratchpad.step(self, action)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        raise AssertionError("the rollout must use areset")

    def step(self, action: str) -> StepResult:
        raise AssertionError("the rollout must use astep")


class FlaggingScratchpad(Scratchpad):
    """Reports reward-hack flags (``info["hack_flags"]``) on task-0's first turn; ``bad_flags``: a malformed one."""

    def __init__(self, bad_flags: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bad_flags = bad_flags

    def step(self, action: str) -> StepResult:
        messages, reward, terminated, truncated, info = super().step(action)
        if self.task == "task-0" and self.steps_taken == 1:
            info["hack_flags"] = (
                "introspection" if self.bad_flags else ["introspection: sys._getframe", "signal: os.kill"]
            )
        return messages, reward, terminated, truncated, info


class GradedScratchpad(Scratchpad):
    """Shaping turn rewards of 0.25 plus a separate verdict on the final step: ``info["outcome"]``."""

    def step(self, action: str) -> StepResult:
        messages, _, terminated, truncated, info = super().step(action)
        if terminated or truncated:
            info["outcome"] = float(self.task.endswith(("0", "2", "4")))  # the verdict: even tasks pass
        return messages, 0.25, terminated, truncated, info


class CutoffGradedScratchpad(GradedScratchpad):
    """GradedScratchpad that scores an episode the rollout cuts off before its verdict as a failure."""

    cutoff_outcome = 0.0


class SplitVerdictScratchpad(GradedScratchpad):
    """One turn; tasks in ``flat_tasks`` fail every episode (a group without signal), the others pass when the
    reply's length is even, so their episodes usually disagree."""

    def __init__(self, flat_tasks: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(turns=1, **kwargs)
        self.flat_tasks = tuple(flat_tasks)

    def step(self, action: str) -> StepResult:
        messages, reward, terminated, truncated, info = super().step(action)
        info["outcome"] = 0.0 if self.task in self.flat_tasks else float(len(action) % 2 == 0)
        return messages, reward, terminated, truncated, info


class InfraFailingScratchpad(SplitVerdictScratchpad):
    """The first episode of task-0 to step reports that it could not be scored for a reason outside the policy
    (``info["infra_failure"]``, as CodeExec does after its grading failed twice); the others alternate between
    passing and failing, in the order they step, so every group carries signal."""

    stepped: dict[str, int] = {}  # one per process: how many episodes of each task stepped

    def step(self, action: str) -> StepResult:
        messages, reward, terminated, truncated, info = super().step(action)
        nth = InfraFailingScratchpad.stepped[self.task] = InfraFailingScratchpad.stepped.get(self.task, 0) + 1
        info["outcome"] = float(nth % 2)
        if self.task == "task-0" and nth == 1:
            info["infra_failure"] = "grading failed twice: the judge was lost"
            info["outcome"] = 0.0  # what the env scored; the rollout must not train on it
        return messages, reward, terminated, truncated, info
