"""CodeExec for the kill/interrupt tests of ``agentrl train`` (importable as ``durability_envs:Class``).

The tiny random model never writes a code block, so plain CodeExec would never start a sandbox;
this one runs a cell at ``reset`` (its sandbox comes from CodeExec's own shared pool), and
gives a third of the tasks long replies, the heavy tail that leaves episodes partial at a step
boundary (``info["max_new_tokens"]`` caps the others at 2 tokens).

``CannedCodeExec`` ignores the model's text and submits a canned solution for each of three tasks (a grading,
hence a grading sandbox, every episode), for the test of an infrastructure fault mid-step.
"""

from __future__ import annotations

import hashlib
import threading
from collections import Counter
from typing import Any

from agentrl.env import StepResult
from envs.code_exec import CodeExecEnv


def is_long(task_id: str) -> bool:
    """A third of the tasks, fixed by their id."""
    return int(hashlib.sha256(task_id.encode()).hexdigest(), 16) % 3 == 0


class SandboxFirstCodeExec(CodeExecEnv):
    """CodeExec whose reset starts the sandbox session (see the module docstring)."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        observation, info = super().reset(seed=seed, options=options)
        self.sandbox.run_python("print('ready')", timeout_s=self.config.cell_timeout_s)
        return observation, info if is_long(self.task.task_id) else {**info, "max_new_tokens": 2}


DOOMED_TASK = "easy/loops/02"  # factorial(n): its canned solution is correct but slow (a grading the test kills)
SOLVED_TASK = "easy/arithmetic/01"  # add_three(x): always the reference solution (reward 1.0)
SPLIT_TASK = "easy/strings/01"  # reverse_string(s): the reference, then a wrong one, alternately (1.0, 0.0, ...)
DOOMED_SLEEP_S = 12.0  # per call of the doomed solution
DOOMED_SOLUTION = (
    f"def factorial(n):\n    import math, time\n    time.sleep({DOOMED_SLEEP_S})\n    return math.factorial(n)"
)


class CannedCodeExec(CodeExecEnv):
    """CodeExec on three fixed tasks whose step submits a canned solution whatever the model wrote (the tiny
    random model never writes code). The doomed task's solution sleeps ``DOOMED_SLEEP_S`` per call (give it
    ``test_timeout_s`` and ``grading_timeout_s`` above that); the split task's submissions alternate, in the
    order they reach this process, between a correct and a wrong solution, so a group of two scores 1.0 and
    0.0 (a group that carries signal: the step takes an optimizer step)."""

    TASKS = (DOOMED_TASK, SOLVED_TASK, SPLIT_TASK)
    _lock = threading.Lock()
    _submitted: Counter[str] = Counter()  # split-task submissions of this process

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{"tasks": "easy", "split": "all", "max_turns": 1, "canary_share": 0.0, **kwargs})
        self._tasks = [self._by_id[task_id] for task_id in self.TASKS]
        self._by_id = {task.task_id: task for task in self._tasks}

    def canned(self) -> str:
        """The solution this episode submits."""
        task = self.task
        if task.task_id == DOOMED_TASK:
            return DOOMED_SOLUTION
        if task.task_id == SPLIT_TASK:
            with self._lock:
                count = self._submitted[task.task_id]
                self._submitted[task.task_id] += 1
            if count % 2:
                return f"def {task.entry_point}(*args):\n    return None"
        assert task.solution is not None
        return task.solution

    def step(self, action: str) -> StepResult:
        return super().step(f"```python\n{self.canned()}\n```")
