"""CodeAgent-v0: write a function with execution feedback: draft, see the examples fail, fix, submit.

Each turn's ```python block runs in a persistent sandbox session (its output is shown). A block that
defines the entry point is a *draft*: the grader runs it on the task's visible examples in a grading
sandbox that no other code entered (run cells never touch it; ``grading_sandbox_scope``) and the model reads
which failed and what they returned or raised. With ``submit: on_pass`` the first draft that passes
every example is graded by the hidden tests; on the last turn the latest draft is. Reward: the episode
outcome (hidden tests, ``info["final_reward"]``) plus per-turn shaping
(the change in the fraction of examples the latest draft passes, minus ``stall_penalty`` for a failing
draft whose example results the episode has already seen; with ``shaping_terminal: zero`` the grading
step also takes the potential back to 0); see docs/code-agent.md. Every check
runs across the grader's trust boundary (``envs.code_exec.grading``); attempted exploits it sees are
``info["hack_flags"]``.
"""

from __future__ import annotations

from typing import Any

from agentrl.env import CANARY, HACK_FLAGS, Message, MultiTurnEnv, StepResult, tool, user
from agentrl.errors import ConfigError
from envs.code_agent.config import CodeAgentConfig
from envs.code_agent.feedback import draft_report, instructions, output_block
from envs.code_agent.verdicts import Verdicts, run_tests
from envs.code_exec.actions import CodeAction, defines_function, parse_action
from envs.code_exec.canary import canary_sources, contradict
from envs.code_exec.env import run_python, submit
from envs.code_exec.sandboxing import shorten
from envs.code_exec.session import SandboxSession
from envs.code_tasks import GeneratedTask, generate_tasks


class CanaryTask(GeneratedTask):
    """A canary copy of a generated task: the same prompt and visible examples, hidden tests no answer passes."""

    def hidden_tests(self) -> list[str]:
        """The source's hidden tests, each contradicted after its call (``envs.code_exec.canary``)."""
        return contradict(super().hidden_tests())


class CodeAgentEnv(SandboxSession, MultiTurnEnv):
    """Multi-turn coding with feedback on visible examples; hidden tests decide the outcome.

    Pair it with ``rollout.stop: ["\\n```\\n"]`` so a turn ends when its code block closes.
    """

    config_model = CodeAgentConfig

    def __init__(self, **kwargs: Any) -> None:
        self.config = CodeAgentConfig(**kwargs)
        self.max_turns = self.config.max_turns
        self.tools = (run_python, submit) if self.config.expose_tools else ()
        self._tasks = generate_tasks(self.config.tasks, self.config.split)
        if not self._tasks:
            raise ConfigError(f"the generator config {self.config.tasks} has no tasks in split {self.config.split!r}")
        self._by_id: dict[str, GeneratedTask] = {task.task_id: task for task in self._tasks}
        self._canaries = canary_sources(list(self._by_id), self.config.canary_share, self.config.split)
        for canary, source in self._canaries.items():
            self._by_id[canary] = CanaryTask(**{**self._by_id[source].model_dump(), "task_id": canary})
        self.task: GeneratedTask = self._tasks[0]
        self._clear()

    def _clear(self) -> None:
        self.turn = 0
        self.cells: list[dict[str, str]] = []  # {"code", "output"} of every cell since the session started
        self.draft: str | None = None  # the latest code that defines the entry point
        self.potential = 0.0  # fraction of visible examples the latest draft passes
        self.seen_results: list[list[Any]] = []  # visible-example results of every checked draft (stall_penalty)
        self.shaping_total = 0.0
        self.flags: list[str] = []  # hack flags raised by any check of this episode

    def task_ids(self) -> list[str]:
        """Task ids of the configured split, its canaries last."""
        return list(self._by_id)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start ``options['task_id']`` (else a task drawn with ``seed``) in a fresh sandbox session."""
        super().reset(seed=seed)
        where = f"split {self.config.split!r} of the generated tasks (seed {self.config.tasks.seed})"
        task_id = self.choose_task_id(options, self._by_id, where)
        self.task = self._by_id[task_id]
        self._clear()
        self.reset_session()
        prompt = f"{self.task.prompt}\n\n{instructions(self.task, self.max_turns, self.config.submit)}"
        info = {"task_id": task_id, "kind": self.task.kind, "entry_point": self.task.entry_point}
        return [user(prompt)], {**info, CANARY: task_id in self._canaries}

    def step(self, action: str) -> StepResult:
        """Run the turn's cell and check its draft, or grade the submission (on the last turn, the latest draft)."""
        self.turn += 1
        last_turn = self.turn >= self.max_turns
        parsed = parse_action(action, self.task.entry_point, submit_on_definition=False)
        if parsed.kind == "submit":
            return self._submit(parsed.code)
        if parsed.kind == "run":
            is_draft = defines_function(parsed.code, self.task.entry_point)
            if last_turn:
                return self._submit(parsed.code if is_draft else self.draft)
            return self._run_draft(parsed) if is_draft else self._run_cell(parsed)
        if last_turn:
            return self._submit(self.draft)
        if parsed.kind == "invalid":
            message = tool(f"Error: {parsed.error}", name="run_python")
        else:
            message = user(
                f"I found no ```python block. Reply with a ```python block that defines `{self.task.entry_point}`."
            )
        info = {"action": parsed.kind, "success": False, "run_failed": False, "reward_components": {"shaping": 0.0}}
        return [message], 0.0, False, False, info

    def _execute(self, code: str) -> tuple[bool, str, float]:
        """Run a cell in the session: (ran without error, output shown to the model, seconds)."""
        result = self.sandbox.run_python(code, timeout_s=self.config.cell_timeout_s)
        text = shorten(result, self.config.max_output_chars)
        # A restarted session lost its state, so a later restore starts after the restart.
        self.cells = [] if result.restarted else [*self.cells, {"code": code, "output": text}]
        return bool(result.ok), text, result.duration_s

    def _reply(self, parsed: CodeAction, text: str) -> Message:
        return tool(text, name="run_python") if parsed.via_tool else user(text)

    def _run_cell(self, parsed: CodeAction) -> StepResult:
        ok, text, seconds = self._execute(parsed.code)
        info = {
            "action": "run",
            "code_ran": ok,
            "run_failed": not ok,
            "success": False,
            "sandbox_time_s": seconds,
            "reward_components": {"shaping": 0.0},
        }
        return [self._reply(parsed, output_block(text) or "(no output)")], 0.0, False, False, info

    def _run_draft(self, parsed: CodeAction) -> StepResult:
        if self.draft is not None and parsed.code.strip() == self.draft.strip():
            return self._repeated(parsed)
        ok, text, seconds = self._execute(parsed.code)
        self.draft = parsed.code
        verdicts = self._check(parsed.code)
        reward = self._shape(verdicts)
        if verdicts.success and self.config.submit == "on_pass":
            return self._grade(parsed.code, reward, verdicts)
        report = draft_report(self.task, verdicts, text, more_turns=True)
        info = {
            "action": "run",
            "code_ran": ok,
            "run_failed": not (ok and verdicts.success),
            "examples_passed": sum(verdicts.passed),
            "examples_total": len(verdicts.passed),
            "success": False,
            "sandbox_time_s": seconds + verdicts.duration_s,
            "reward_components": {"shaping": reward},
            HACK_FLAGS: list(verdicts.flags),
        }
        return [self._reply(parsed, report)], reward, False, False, info

    def _repeated(self, parsed: CodeAction) -> StepResult:
        """The same draft again (a small model's most common second reply): say so instead of re-running it."""
        failing = self.potential < 1.0
        text = "This is the same code as your previous version, so it gives the same results" + (
            f": change `{self.task.entry_point}` to fix the failing examples." if failing else "."
        )
        reward = self._stalled() if failing else 0.0
        info = {
            "action": "run",
            "repeated": True,
            "stalled": failing,
            "run_failed": failing,
            "success": False,
            "reward_components": {"shaping": reward},
        }
        return [self._reply(parsed, text)], reward, False, False, info

    def _stalled(self) -> float:
        """Turn reward of a failing draft that changed nothing on the visible examples (``stall_penalty``)."""
        penalty = self.config.stall_penalty
        self.shaping_total -= penalty
        return -penalty if penalty else 0.0

    def _check(self, code: str) -> Verdicts:
        """The draft's verdicts on the visible examples."""
        with self.grading_sandbox(code) as sandbox:
            return self._flagged(
                run_tests(self.grader, sandbox, self.task.coding_task(), code, self.task.visible_tests())
            )

    def _flagged(self, verdicts: Verdicts) -> Verdicts:
        """Add a check's hack flags to the episode's; a check whose grading broke (``grading_error``) gives its
        sandbox back, so the draft's next check runs in a fresh one."""
        self.flags.extend(flag for flag in verdicts.flags if flag not in self.flags)
        if any(flag.startswith("grading_error") for flag in verdicts.flags):
            self.give_back_held_grading()
        return verdicts

    def _shape(self, verdicts: Verdicts) -> float:
        """Shaping by a potential: shaping x (new fraction of examples passed - previous fraction).

        With ``zero_reward_if_flagged`` a flagged check earns no shaping (its potential still counts).
        """
        reward = self.config.shaping * (verdicts.fraction - self.potential)
        if verdicts.flags and self.config.zero_reward_if_flagged:
            reward = min(reward, 0.0)
        self.potential = verdicts.fraction
        self.shaping_total += reward
        results = [list(verdicts.passed), list(verdicts.messages), verdicts.setup_error]
        if not verdicts.success and results in self.seen_results:
            reward += self._stalled()  # e.g. a renamed variable, or back to an earlier draft: same feedback again
        self.seen_results.append(results)
        return reward

    def _terminal_shaping(self) -> float:
        """The grading step's move to the terminal state: -shaping x potential when its potential is 0, else 0.

        With ``shaping_terminal: zero`` the episode's shaping telescopes to Phi(end) - Phi(start) = 0 (Ng et al.
        1999): hard-coding the visible examples then earns nothing over the episode; with ``final_draft`` it keeps
        shaping x the graded draft's fraction.
        """
        if self.config.shaping_terminal != "zero":
            return 0.0
        reward = -self.config.shaping * self.potential
        self.shaping_total += reward
        return reward

    def _submit(self, code: str | None) -> StepResult:
        if code is None:  # never wrote a draft: nothing to grade, outcome 0
            return [], 0.0, True, False, self._outcome_info(0.0, False, 0, len(self.task.hidden), [])
        if code == self.draft:  # already checked: its potential is current; a failing one is resubmitted unchanged
            return self._grade(code, self._stalled() if self.potential < 1.0 else 0.0, None)
        verdicts = self._check(code)
        self.draft = code
        return self._grade(code, self._shape(verdicts), verdicts)

    def _grade(self, code: str, reward: float, verdicts: Verdicts | None) -> StepResult:
        with self.grading_sandbox(code) as sandbox:
            hidden = self._flagged(
                run_tests(self.grader, sandbox, self.task.coding_task(), code, self.task.hidden_tests())
            )
        outcome = float(hidden.success) if self.config.outcome == "all" else hidden.fraction
        reward += self._terminal_shaping()
        zeroed = bool(self.flags) and self.config.zero_reward_if_flagged  # any check of the episode was flagged
        if zeroed:  # this turn's positive shaping is withheld too (and leaves the shaping total)
            paid = max(reward, 0.0)
            outcome, reward, self.shaping_total = 0.0, reward - paid, self.shaping_total - paid
        errors = [m for m in hidden.messages if m is not None][:3]
        info = self._outcome_info(
            outcome, hidden.success and not zeroed, sum(hidden.passed), len(hidden.passed), errors
        )
        checked = hidden.duration_s + (verdicts.duration_s if verdicts is not None else 0.0)
        info.update(sandbox_time_s=checked, examples_passed=round(self.potential * len(self.task.visible)))
        info[HACK_FLAGS] = list(self.flags)
        return [], reward, True, False, info

    def _outcome_info(
        self, outcome: float, success: bool, passed: int, total: int, errors: list[str]
    ) -> dict[str, Any]:
        """Info of the final step: the outcome is ``final_reward`` (and ``outcome``), separate from turn rewards."""
        return {
            "action": "submit",
            "success": success,
            "final_reward": outcome,
            "outcome": outcome,
            "tests_passed": passed,
            "tests_total": total,
            "errors": errors,
            "reward_components": {"outcome": outcome, "shaping": self.shaping_total, "success": float(success)},
        }

    def preflight(self) -> list[str]:
        """Start this env's sandbox and run one cell: proves the Docker engine, the image and the limits work."""
        return self.sandbox_preflight(f"{len(self._tasks)} generated tasks, split {self.config.split!r}")

    def snapshot(self) -> dict[str, Any]:
        """Task, turn, draft, shaping state and the session's cells with their outputs (replayed on restore)."""
        return {
            "task_id": self.task.task_id,
            "turn": self.turn,
            "cells": [dict(cell) for cell in self.cells],
            "draft": self.draft,
            "potential": self.potential,
            "shaping_total": self.shaping_total,
            "flags": list(self.flags),
            "seen_results": [list(results) for results in self.seen_results],
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Rebuild ``snapshot``'s state: re-run its cells, and fail (the episode restarts) if an output differs."""
        self.task = self._by_id[snapshot["task_id"]]
        cells = snapshot["cells"]
        self.replay_cells(self.task.task_id, [cell["code"] for cell in cells], [cell["output"] for cell in cells])
        self.cells = [dict(cell) for cell in snapshot["cells"]]
        self.turn, self.draft = int(snapshot["turn"]), snapshot["draft"]
        self.potential, self.shaping_total = float(snapshot["potential"]), float(snapshot["shaping_total"])
        self.flags = list(snapshot.get("flags", []))  # absent in snapshots written before hack flags
        self.seen_results = [list(results) for results in snapshot.get("seen_results", [])]  # absent before 2026-12
