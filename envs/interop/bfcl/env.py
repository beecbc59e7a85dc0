"""BFCL-MultiTurn-v0: the multi-turn categories of the Berkeley Function Calling Leaderboard (``bfcl-eval``).

One episode is one BFCL entry. Its user turns arrive one after the other: the model calls the entry's
functions (BFCL's function docs, converted by BFCL for function-calling models, in the system prompt)
as ``<tool_call>`` blocks, each step's calls run against BFCL's own simulated API instances (fresh per
episode) and their results come back as tool messages, as BFCL's harness returns them. A reply with no
tool call ends the user turn, as in BFCL's harness; the next user turn follows, or the episode ends.

Grading is BFCL's ``multi_turn_checker`` on the calls that ran. When user turn t ends, the checker
runs on turns 0..t: ``reward_components["turn_t"]`` is that verdict (1 while every turn so far
matches the ground truth's state and responses), the step's reward is its change (-1 on the turn
where the entry first fails, else 0), and on the last turn ``info["outcome"]`` is the entry's verdict,
the number BFCL reports. More than BFCL's step limit (20) of calling steps in one user turn fails the
entry, as BFCL's harness force-quits it. ``miss_func`` entries reveal a function at a later turn with
BFCL's own message (the docs, then "I have updated some more functions..."); a function not yet
offered is unknown to the episode. BFCL runs in a worker in its own venv (``bridge``); the categories
and the train/test split are in ``tasks``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentrl.chat import tools_system_prompt
from agentrl.env import Message, MultiTurnEnv, StepResult, system, tool
from agentrl.errors import ConfigError, PreflightError
from agentrl.tools.toolcall import ToolCall, has_tool_call, parse_tool_calls
from envs.interop.bfcl.bridge import BfclBridge, BfclError, BfclTimeout
from envs.interop.bfcl.tasks import Category, Split, bfcl_category, in_split


class BfclMultiTurnConfig(BaseModel):
    """Constructor kwargs of BFCL-MultiTurn-v0."""

    model_config = ConfigDict(extra="forbid")
    categories: list[Category] = Field(
        default_factory=lambda: ["base"], min_length=1, description="BFCL multi-turn categories (web search: none)."
    )
    split: Split = Field("train", description="train, test (entry numbers that are multiples of 5) or all.")
    max_turns: int = Field(40, ge=1, description="Assistant replies before the episode is truncated (outcome 0).")
    python: str | None = Field(None, description="Python of BFCL's venv (default $AGENTRL_BFCL_PYTHON, .venv-bfcl).")
    timeout_s: float = Field(60.0, gt=0, description="Longest wait for one BFCL request (a stuck call fails it).")


class BfclMultiTurnEnv(MultiTurnEnv):
    """BFCL multi-turn entries graded by BFCL's own multi-turn checker (bfcl-eval, in its own venv)."""

    config_model = BfclMultiTurnConfig

    def __init__(self, **kwargs: Any) -> None:
        self.config = BfclMultiTurnConfig(**kwargs)
        self.max_turns = self.config.max_turns
        self.bridge = BfclBridge(self.config.python, self.config.timeout_s)
        self._ids: list[str] | None = None
        self._episode: str | None = None
        self.entry_id = ""
        self.turn = 0  # the user turn in progress
        self.turns = 0  # user turns of the entry
        self.replies = 0  # assistant replies so far
        self.steps_in_turn = 0  # replies with tool calls in the user turn in progress
        self.verdicts: list[bool] = []

    def task_ids(self) -> list[str]:
        """The entry ids of the configured categories in the split, in BFCL's order."""
        if self._ids is None:
            names = [bfcl_category(category) for category in self.config.categories]
            ids = self.bridge.request("ids", categories=names)["ids"]
            self._ids = [entry_id for entry_id in ids if in_split(entry_id, self.config.split)]
        return list(self._ids)

    def preflight(self) -> list[str]:
        """Start the BFCL worker and count the entries."""
        try:
            count = len(self.task_ids())
        except BfclError as exc:
            raise PreflightError(str(exc)) from exc
        version = self.bridge.hello.get("bfcl_eval", "?")
        return [f"bfcl-eval {version} ({self.bridge.python}): {count} {self.config.split} entries"]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start an entry (``options['task_id']``, else one drawn with ``seed``) on fresh simulated APIs."""
        super().reset(seed=seed)
        self.entry_id = self.choose_task_id(options, self.task_ids(), "the BFCL-MultiTurn-v0 split")
        self._end_episode()
        started = self.bridge.request("start", entry_id=self.entry_id)
        self._episode = started["episode"]
        self.turns, self.turn, self.replies, self.steps_in_turn, self.verdicts = started["turns"], 0, 0, 0, []
        self.max_steps = int(self.bridge.hello["max_steps"])
        opening = self._open_turn(0)
        if not started["tools"]:
            raise ConfigError(f"BFCL entry {self.entry_id} offers no functions; it is not a multi-turn entry")
        return [system(tools_system_prompt(started["tools"])), *opening], {"task_id": self.entry_id}

    def _open_turn(self, turn: int) -> list[Message]:
        opened = self.bridge.request("turn", episode=self._episode, turn=turn)
        self.turn, self.steps_in_turn = turn, 0
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in opened["messages"]]

    def step(self, action: str) -> StepResult:
        """Run the reply's tool calls, or end the user turn (grade it) when the reply calls nothing."""
        self.replies += 1
        try:
            if has_tool_call(action):
                return self._call_step(action)
            return self._end_turn()
        except BfclTimeout as exc:
            self._episode = None  # the worker was killed with the episode's state
            info = {"success": False, "outcome": 0.0, "bfcl_error": str(exc)}
            return [tool(f"Error during execution: {exc}")], 0.0, True, False, info

    def _call_step(self, action: str) -> StepResult:
        calls = parse_tool_calls(action)
        self.steps_in_turn += 1
        valid = [{"name": c.name, "arguments": c.arguments} for c in calls if c.ok]
        results = self.bridge.request("execute", episode=self._episode, calls=valid)["results"] if valid else []
        messages = self._tool_messages(calls, iter(results))
        info: dict[str, Any] = {"tool_calls": len(calls), "tool_errors": sum(not c.ok for c in calls)}
        if self.steps_in_turn > self.max_steps:  # BFCL's harness force-quits the entry: it fails
            info.update(success=False, outcome=0.0, bfcl_error=f"more than {self.max_steps} steps in turn {self.turn}")
            return messages, 0.0, True, False, info
        return messages, 0.0, False, self._out_of_replies(info), info

    def _tool_messages(self, calls: list[ToolCall], results: Any) -> list[Message]:
        """One tool message per call in order: BFCL's result, or agentrl's parse error for a malformed call."""
        return [
            tool(next(results), name=c.name) if c.ok else tool(f"Error: {c.error}", name=c.name or None) for c in calls
        ]

    def _out_of_replies(self, info: dict[str, Any]) -> bool:
        """At ``max_turns`` the entry is unfinished: it fails, as a force-quit entry does in BFCL."""
        if self.replies < self.max_turns:
            return False
        info.update(success=False, outcome=0.0)
        return True

    def _end_turn(self) -> StepResult:
        checked = self.bridge.request("check", episode=self._episode)
        previous = self.verdicts[-1] if self.verdicts else True
        self.verdicts = [bool(v) for v in checked["verdicts"]]
        reward = float(self.verdicts[-1]) - float(previous)
        components = {f"turn_{i}": float(v) for i, v in enumerate(self.verdicts)}
        info: dict[str, Any] = {"reward_components": components, "bfcl_error": checked["error"]}
        if self.turn + 1 < self.turns:
            messages = self._open_turn(self.turn + 1)
            return messages, reward, False, self._out_of_replies(info), info
        info.update(success=self.verdicts[-1], outcome=float(self.verdicts[-1]), decoded=checked["decoded"])
        return [], reward, True, False, info

    def _end_episode(self) -> None:
        if self._episode is not None:
            self.bridge.request("end", episode=self._episode)
            self._episode = None

    def close(self) -> None:
        """Stop the BFCL worker."""
        self.bridge.close()
        self._episode = None
