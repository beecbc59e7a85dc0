"""ToolUse-v0: answer a question by calling typed Python tools, then reply ``Answer: <value>``.

Each turn either calls tools (results come back as tool messages; malformed calls come back as
error messages the model can fix) or answers. Reward: 1 for a correct answer (numbers within
0.01), or with ``reward="graded"`` partial credit for numbers within 10 %.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentrl.env import Message, MultiTurnEnv, StepResult, system, user
from agentrl.tools import execute_tool_calls
from agentrl.tools.toolcall import has_tool_call
from envs.tool_use.questions import make_question, question_ids
from envs.tool_use.tools import TOOLS

_ANSWER = re.compile(r"answer\s*:\s*(.+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
INSTRUCTIONS = (
    "Answer the question. Use the tools when they help. When you know the answer, reply with a "
    "final line 'Answer: <value>' (a number without units, or a name)."
)


class ToolUseConfig(BaseModel):
    """Constructor arguments of ToolUse-v0."""

    model_config = ConfigDict(extra="forbid")

    split: Literal["train", "test", "test_kinds", "test_instances", "all"] = Field(
        "train", description="Task split; 'multi' questions are a held-out kind."
    )
    per_kind: int = Field(50, ge=2, description="Questions generated per kind.")
    heldout_per_kind: int = Field(
        10, ge=1, description="Last questions of each training kind held out as test_instances."
    )
    max_turns: int = Field(4, ge=1, description="Assistant turns before the episode is truncated.")
    reward: Literal["exact", "graded"] = Field(
        "exact", description="exact: 1 or 0; graded: numbers within 10 % earn partial credit."
    )
    turn_cost: float = Field(0.0, ge=0.0, description="Subtracted from the reward of each turn that does not answer.")


def parse_answer(text: str) -> str | None:
    """The value after the last 'Answer:' in ``text`` (None when there is none)."""
    matches = _ANSWER.findall(text)
    return matches[-1].strip().rstrip(".").strip() if matches else None


def score_answer(given: str, expected: float | str, mode: str = "exact") -> float:
    """1.0 for a match (numbers within 0.01, names case-insensitive); graded partial credit for close numbers."""
    if isinstance(expected, str):
        return float(given.strip().lower() == expected.lower())
    numbers = _NUMBER.findall(given)
    if not numbers:
        return 0.0
    value = float(numbers[0].replace(",", ""))
    if abs(value - expected) <= 0.01 + 1e-9:
        return 1.0
    if mode == "graded" and expected != 0:
        return max(0.0, 1.0 - 10.0 * abs(value - expected) / abs(expected))
    return 0.0


class ToolUseEnv(MultiTurnEnv):
    """Questions answered with a calculator, unit conversion and a country lookup table."""

    tools = TOOLS
    config_model = ToolUseConfig

    def __init__(self, **kwargs: Any) -> None:
        self.config = ToolUseConfig(**kwargs)
        self.max_turns = self.config.max_turns
        self._ids = question_ids(self.config.split, self.config.per_kind, self.config.heldout_per_kind)
        self._known = dict.fromkeys(self._ids)  # ordered like the ids (same seeded draws), O(1) membership
        self.question = make_question(self._ids[0])
        self.turn = 0

    def task_ids(self) -> list[str]:
        """Question ids of the configured split."""
        return list(self._ids)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start the question ``options['task_id']`` (else one drawn with ``seed``)."""
        super().reset(seed=seed)
        task_id = self.choose_task_id(options, self._known, f"ToolUse split {self.config.split!r}")
        self.question = make_question(task_id)
        self.turn = 0
        return [system(INSTRUCTIONS), user(self.question.text)], {"task_id": task_id, "kind": self.question.kind}

    def step(self, action: str) -> StepResult:
        """Run the turn's tool calls, or grade its answer."""
        self.turn += 1
        truncated = self.turn >= self.max_turns
        answer = parse_answer(action)
        if has_tool_call(action):
            messages = execute_tool_calls(action, self.tools)
            errors = sum(m["content"].startswith("Error:") for m in messages)
            info = {"action": "tool_calls", "tool_calls": len(messages), "tool_errors": errors, "success": False}
            return messages, 0.0 - self.config.turn_cost, False, truncated, info
        if answer is None:
            hint = user("Call a tool, or give your final line as 'Answer: <value>'.")
            return [hint], 0.0 - self.config.turn_cost, False, truncated, {"action": "none", "success": False}
        score = score_answer(answer, self.question.answer, self.config.reward)
        info = {
            "action": "answer",
            "answer": answer,
            "expected": self.question.answer,
            "success": score >= 1.0,
            "reward_components": {"answer": score},
        }
        return [], score, True, False, info
