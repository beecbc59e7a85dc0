"""ToolUse-v0: answer a question by calling typed Python tools, then reply ``Answer: <value>``.

Each turn either calls tools (results come back as tool messages; malformed calls come back as
error messages the model can fix) or answers. Outcome: 1 for a correct answer (numbers within
0.01), or with ``reward="graded"`` partial credit for numbers within 10 %. Optional per-turn rewards
(``fact_reward``, ``call_reward``) pay a turn for tool results that returned a value the answer needs and
charge a failed call; the outcome stays separate (``info["outcome"]``), so per-turn credit schemes
read them as turn signals (docs/writing-an-environment.md, "Rewards").
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentrl.env import Message, MultiTurnEnv, StepResult, system, user
from agentrl.tools import execute_tool_calls
from agentrl.tools.toolcall import has_tool_call
from envs.tool_use.questions import (
    DEFAULT_HELDOUT_KINDS,
    DEFAULT_KINDS,
    Question,
    QuestionKind,
    distinct_questions,
    make_question,
    question_ids,
)
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

    split: Literal["train", "validation", "test", "test_kinds", "test_instances", "all"] = Field(
        "train",
        description="Task split: test_kinds are the heldout_kinds, test_instances the last questions of the rest.",
    )
    kinds: list[QuestionKind] = Field(
        list(DEFAULT_KINDS), min_length=1, description="Question kinds in the task set (envs/tool_use/questions.py)."
    )
    heldout_kinds: list[QuestionKind] = Field(
        list(DEFAULT_HELDOUT_KINDS), description="Kinds held out whole as test_kinds (each must be in kinds)."
    )
    per_kind: int = Field(50, ge=2, description="Questions generated per kind.")
    heldout_per_kind: int = Field(
        10, ge=1, description="Last questions of each training kind held out as test_instances."
    )
    validation_per_kind: int = Field(
        0, ge=0, description="Questions of each training kind before the test_instances kept as the validation split."
    )
    tools: list[Literal["calculator", "convert_units", "lookup"]] = Field(
        ["calculator", "convert_units", "lookup"],
        min_length=1,
        description="Tools the model is offered (their schemas go into the system prompt: fewer tools, a shorter "
        "prompt). A call to a tool not offered is answered with an error naming the offered ones.",
    )
    max_turns: int = Field(4, ge=1, description="Assistant turns before the episode is truncated.")
    reward: Literal["exact", "graded"] = Field(
        "exact", description="exact: 1 or 0; graded: numbers within 10 % earn partial credit."
    )
    fact_reward: float = Field(
        0.0,
        ge=0.0,
        description="Turn reward: fact_reward x the share of the values the answer needs (the facts and the result) "
        "that this turn's tool results returned for the first time. Each value pays once per episode.",
    )
    call_reward: float = Field(
        0.0,
        ge=0.0,
        description="Turn reward: -call_reward for a turn with a malformed or failed call, or with neither a call "
        "nor an answer; 0 for a turn whose calls all ran (a valid call scores call_reward above an invalid one). "
        "Calling is never paid by itself: a turn paid for calling would outrank the answering turn, and a policy "
        "learned to call until the episode was truncated.",
    )

    @model_validator(mode="after")
    def _splits_have_questions(self) -> ToolUseConfig:
        unknown = sorted(set(self.heldout_kinds) - set(self.kinds))
        if unknown:
            raise ValueError(f"heldout_kinds {unknown} are not in kinds {self.kinds}; add them to kinds or drop them")
        if self.heldout_per_kind + self.validation_per_kind >= self.per_kind:
            raise ValueError(
                f"heldout_per_kind ({self.heldout_per_kind}) + validation_per_kind ({self.validation_per_kind}) leave "
                f"no training question of the per_kind {self.per_kind}; raise per_kind or lower them"
            )
        for kind in self.kinds:
            distinct = distinct_questions(kind)
            if distinct is not None and self.per_kind > distinct:
                raise ValueError(
                    f"kind {kind!r} has {distinct} different questions, fewer than per_kind {self.per_kind}: its "
                    "splits would share questions; lower per_kind or drop the kind"
                )
        if set(self.kinds) <= set(self.heldout_kinds) and self.split in ("train", "validation", "test_instances"):
            raise ValueError(f"every kind is held out, so split {self.split!r} is empty; train on at least one kind")
        if self.split == "validation" and self.validation_per_kind == 0:
            raise ValueError("split 'validation' is empty: set validation_per_kind > 0")
        if self.split in ("test_kinds",) and not self.heldout_kinds:
            raise ValueError("split 'test_kinds' is empty: name heldout_kinds")
        return self


def _returned(needed: float | str, results: list[str]) -> bool:
    """A tool result states the needed value (numbers within 1e-6 relative, names case-insensitive)."""
    if isinstance(needed, str):
        return any(result.strip().lower() == needed.lower() for result in results)
    for result in results:
        for token in _NUMBER.findall(result):
            value = float(token.replace(",", ""))
            if abs(value - needed) <= 1e-6 * max(1.0, abs(needed)):
                return True
    return False


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
    # An episode cut off by the token budget has paid turns but no answer: it scores as a wrong answer. Without
    # this its R was the sum of its fact rewards, more than a wrong answer's 0, and a policy learned to fill the
    # budget with calls after the lookups.
    cutoff_outcome = 0.0

    def __init__(self, **kwargs: Any) -> None:
        self.config = ToolUseConfig(**kwargs)
        self.max_turns = self.config.max_turns
        self.tools = tuple(tool for tool in TOOLS if tool.__name__ in self.config.tools)
        c = self.config
        self._ids = question_ids(
            c.split,
            c.per_kind,
            c.heldout_per_kind,
            kinds=c.kinds,
            heldout_kinds=c.heldout_kinds,
            validation_per_kind=c.validation_per_kind,
        )
        self._known = dict.fromkeys(self._ids)  # ordered like the ids (same seeded draws), O(1) membership
        self.question: Question = make_question(self._ids[0])
        self.turn = 0
        self.found: set[int] = set()  # indices into question.needed that a tool result has returned

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
        self.found = set()
        return [system(INSTRUCTIONS), user(self.question.text)], {"task_id": task_id, "kind": self.question.kind}

    def step(self, action: str) -> StepResult:
        """Run the turn's tool calls, or grade its answer.

        Tool turns report ``action: "run"`` (``run_failed`` when a call failed) and answers ``"submit"``, so the
        behaviour metrics count a failed call followed by a correct answer as a recovery; ``tool_calls`` and
        ``tool_errors`` give the valid-call rate.
        """
        self.turn += 1
        truncated = self.turn >= self.max_turns
        ending = {"outcome": 0.0} if truncated else {}
        if has_tool_call(action):
            messages = execute_tool_calls(action, self.tools)
            errors = sum(m["content"].startswith("Error:") for m in messages)
            facts = self._new_facts([m["content"] for m in messages if not m["content"].startswith("Error:")])
            # A valid call earns nothing by itself: a turn paid for calling would beat the answering turn in the
            # per-turn comparison, and a policy learned to call until truncated. Only what a call returns pays.
            calls = -self.config.call_reward if errors else 0.0
            info = {
                "action": "run",
                "run_failed": errors > 0,
                "tool_calls": len(messages),
                "tool_errors": errors,
                "success": False,
                "reward_components": {"facts": facts, "calls": calls},
                **ending,
            }
            return messages, facts + calls, False, truncated, info
        answer = parse_answer(action)
        if answer is None:
            hint = user("Call a tool, or give your final line as 'Answer: <value>'.")
            info = {"action": "none", "success": False, "reward_components": {"calls": -self.config.call_reward}}
            return [hint], -self.config.call_reward, False, truncated, {**info, **ending}
        score = score_answer(answer, self.question.answer, self.config.reward)
        info = {
            "action": "submit",
            "answer": answer,
            "expected": self.question.answer,
            "success": score >= 1.0,
            "outcome": score,
            "reward_components": {"answer": score},
        }
        return [], 0.0, True, False, info

    def _new_facts(self, results: list[str]) -> float:
        """fact_reward x the share of the needed values these results returned for the first time."""
        needed = self.question.needed
        new = {i for i, value in enumerate(needed) if i not in self.found and _returned(value, results)}
        self.found |= new
        return self.config.fact_reward * len(new) / len(needed) if needed else 0.0
