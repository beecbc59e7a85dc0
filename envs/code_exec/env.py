"""CodeExec-v0: write a function, optionally running code in a stateful sandbox first; graded by hidden tests.

State = the chosen task, the turn count and the cells executed in the sandbox session, so
``snapshot()`` is the list of cells with the output each one showed, and ``restore()`` re-runs them
in a fresh session (the same as replaying the actions, without grading again) and checks every
output against the recorded one: a cell that reads the time, randomness or anything outside the
session diverges, and the episode restarts rather than continue from a state the model never saw.
Reward on submit = fraction of tests passed, judged outside the sandbox (``envs.code_exec.grading``);
attempted exploits are ``info["hack_flags"]``.
"""

from __future__ import annotations

from typing import Any

from agentrl.env import CANARY, HACK_FLAGS, INFRA_FAILURE, Message, MultiTurnEnv, StepResult, tool, user
from agentrl.errors import ConfigError, ReplayDivergenceError
from envs.code_exec.actions import CodeAction, parse_action
from envs.code_exec.canary import canary_sources, contradict
from envs.code_exec.config import CodeExecConfig
from envs.code_exec.grading.result import GradeResult, HackFlag, TestVerdict
from envs.code_exec.sandboxing import shorten
from envs.code_exec.session import SandboxSession
from envs.code_exec.tasks import CodingTask, load_tasks
from sandboxes.errors import SandboxCrashedError, SandboxStartError, SandboxUnavailableError


def failed_grading(tests: int, reason: str) -> GradeResult:
    """A scored 0 with a ``grading_error`` flag: what the grader returns when grading itself broke."""
    flag = HackFlag(kind="grading_error", detail=reason[:300], source="host")
    verdicts = [TestVerdict(index=i, passed=False, error=f"grading failed: {reason[:300]}") for i in range(tests)]
    return GradeResult(verdicts=verdicts, flags=[flag])


def run_python(code: str) -> str:
    """Run Python code in your persistent session and see its output (variables persist across calls).

    Args:
        code: The Python source to execute.
    """
    raise NotImplementedError("executed by CodeExecEnv inside its sandbox")  # the schema is what matters


def submit(code: str) -> str:
    """Submit your final solution: Python source that defines the requested function.

    Args:
        code: The complete solution source.
    """
    raise NotImplementedError("executed by CodeExecEnv inside its sandbox")


class CodeExecEnv(SandboxSession, MultiTurnEnv):
    """Multi-turn sandboxed coding: run cells, then submit a function graded by hidden tests.

    Pair it with ``rollout.stop: ["```\\n", "</tool_call>"]`` so a turn ends when its code block
    or tool call closes (a row that never stops would hold the whole batch).
    """

    config_model = CodeExecConfig
    max_turns = 3  # CodeExecConfig.max_turns's default; the instance takes the configured value
    tools = (run_python, submit)  # always accepted as calls; listed in the prompt only with expose_tools

    def __init__(self, **kwargs: Any) -> None:
        self.config = CodeExecConfig(**kwargs)
        self.max_turns = self.config.max_turns
        self._tasks = load_tasks(
            self.config.tasks,
            self.config.split,
            heldout_kinds=self.config.heldout_kinds,
            heldout_per_kind=self.config.heldout_per_kind,
        )
        if not self._tasks:
            raise ConfigError(
                f"task source {self.config.tasks!r} has no tasks in split {self.config.split!r}; choose another split "
                "or source"
            )
        self._by_id = {task.task_id: task for task in self._tasks}
        self._canaries = canary_sources(list(self._by_id), self.config.canary_share, self.config.split)
        for canary, source in self._canaries.items():
            task = self._by_id[source]
            self._by_id[canary] = task.model_copy(update={"task_id": canary, "tests": contradict(task.tests)})
        self.task: CodingTask = self._tasks[0]
        self.cells: list[str] = []
        self.outputs: list[str] = []  # what each cell showed the model (restore() compares the replay with it)
        self.turn = 0

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools' schemas for the chat template, only with ``expose_tools`` (fenced code blocks always work)."""
        return super().tool_schemas() if self.config.expose_tools else []

    def task_ids(self) -> list[str]:
        """Task ids of the configured split, its canaries last."""
        return list(self._by_id)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start ``options['task_id']`` (else a task drawn with ``seed``) in a fresh sandbox session."""
        super().reset(seed=seed)
        task_id = self.choose_task_id(options, self._by_id, f"{self.config.tasks!r} split {self.config.split!r}")
        self.task, self.cells, self.outputs, self.turn = self._by_id[task_id], [], [], 0
        self.reset_session()
        return [user(self._instructions())], {
            "task_id": task_id,
            "kind": self.task.kind,
            "entry_point": self.task.entry_point,
            CANARY: task_id in self._canaries,
        }

    def _instructions(self) -> str:
        entry = self.task.entry_point
        if self.max_turns == 1:
            return f"{self.task.prompt}\n\nAnswer with a single ```python code block that defines `{entry}`."
        return (
            f"{self.task.prompt}\n\nYou may run Python to test ideas: a ```python block that does not define `{entry}` "
            "runs in a persistent session and you see its output. Your answer is a ```python block that defines "
            f"`{entry}`; "
            f"it is graded by hidden tests. You have {self.max_turns} turns."
        )

    def step(self, action: str) -> StepResult:
        """Run the turn's cell, or grade its submission (on the last turn any code is graded)."""
        self.turn += 1
        last_turn = self.turn >= self.max_turns
        parsed = parse_action(action, self.task.entry_point, submit_on_definition=self.config.submit_on_definition)
        if parsed.kind == "submit" or (parsed.kind == "run" and last_turn):
            return self._submit(parsed)
        cost = 0.0 - self.config.turn_cost
        if parsed.kind == "run":
            return self._run_cell(parsed, cost, last_turn)
        if parsed.kind == "invalid":
            message = tool(f"Error: {parsed.error}", name="run_python")
        else:
            message = user(
                f"I found no ```python block. Answer with a ```python block that defines `{self.task.entry_point}`."
            )
        info = {"action": parsed.kind, "success": False, "reward_components": {"turn_cost": cost}}
        return [message], cost, False, last_turn, info

    def _run_cell(self, parsed: CodeAction, cost: float, last_turn: bool) -> StepResult:
        result = self.sandbox.run_python(parsed.code, timeout_s=self.config.cell_timeout_s)
        ok = result.ok
        text = shorten(result, self.config.max_output_chars)
        # A restarted session lost its state, so replay starts after the restart.
        self.cells = [] if result.restarted else [*self.cells, parsed.code]
        self.outputs = [] if result.restarted else [*self.outputs, text]
        message = tool(text, name="run_python") if parsed.via_tool else user(f"Output:\n```\n{text}\n```")
        bonus = self.config.run_bonus if ok else 0.0
        info = {
            "action": "run",
            "code_ran": ok,
            "success": False,
            "sandbox_time_s": result.duration_s,
            "reward_components": {"turn_cost": cost, "code_ran": bonus},
        }
        return [message], cost + bonus, False, last_turn, info

    def _grade(self, code: str) -> tuple[GradeResult, str | None]:
        """Grade ``code``; a grading that failed for a reason outside the solution (``grading_error``: the judge
        lost, a sandbox or Docker that failed) is graded again once on another sandbox (the pool replaces one
        that cannot reset). Returns the result and, when the second grading failed too, why."""
        for _ in range(2):
            try:
                with self.grading_sandbox() as sandbox:
                    result = self.grader.grade(sandbox, self.task, code)
            except (SandboxStartError, SandboxCrashedError, SandboxUnavailableError) as exc:  # no grading sandbox
                result = failed_grading(len(self.task.tests), f"{type(exc).__name__}: {exc}")
            errors = [f.detail for f in result.flags if f.kind == "grading_error"]
            if not errors:
                return result, None
        return result, f"grading failed twice: {errors[0]}"[:500]

    def _submit(self, parsed: CodeAction) -> StepResult:
        result, infra_failure = self._grade("\n" + parsed.code)
        flags = result.flag_strings
        reward, components = result.fraction, {"tests": result.fraction}
        zeroed = bool(flags) and self.config.zero_reward_if_flagged
        info: dict[str, Any] = {"outcome": 0.0} if zeroed else {}  # the whole episode (R_i), earlier shaping too
        if zeroed:
            reward, components["hack_penalty"] = 0.0, -result.fraction
        info.update(
            {
                "action": "submit",
                "success": result.success and not zeroed,
                "tests_passed": sum(result.passed),
                "tests_total": len(result.passed),
                "errors": result.errors[:3],
                "sandbox_time_s": result.duration_s,
                "reward_components": components,
                HACK_FLAGS: flags,
            }
        )
        if infra_failure:  # no verdict on the solution: the rollout leaves the episode out of the loss
            info[INFRA_FAILURE] = infra_failure
        return [], reward, True, False, info

    def preflight(self) -> list[str]:
        """Start this env's sandbox and run one cell: proves the Docker engine, the image and the limits work."""
        return self.sandbox_preflight(f"{len(self._tasks)} {self.config.tasks!r} tasks, split {self.config.split!r}")

    def snapshot(self) -> dict[str, Any]:
        """Task, turn count, executed cells and their outputs: enough to rebuild the session and verify it."""
        return {
            "task_id": self.task.task_id,
            "turn": self.turn,
            "cells": list(self.cells),
            "outputs": list(self.outputs),
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Rebuild the state of ``snapshot`` (after ``reset`` with the same task): re-run its cells in order.

        Raises ``ReplayDivergenceError`` when a cell's output differs from the recorded one (the
        rollout then restarts the episode, recorded in its restore log).
        """
        self.task = self._by_id[snapshot["task_id"]]
        cells, recorded = list(snapshot["cells"]), snapshot.get("outputs")
        if recorded is None or len(recorded) != len(cells):
            raise ReplayDivergenceError(
                f"CodeExec snapshot of task {self.task.task_id!r} has no output per cell (an older agentrl wrote it), "
                "so a replay cannot be verified; the episode restarts"
            )
        self.replay_cells(self.task.task_id, cells, recorded)
        self.cells, self.outputs, self.turn = cells, list(recorded), int(snapshot["turn"])
