"""MagicWord: a toy env a tiny random model can learn in a few dozen steps (trainer end-to-end tests).

Each turn the model is asked to say a magic word. Reward per turn: 1.0 when the word appears in
the answer, else 0.5 * the fraction of the answer's non-space characters that are letters of the
word, a dense signal that differs between samples even for a random-weight model.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentrl.env import Message, MultiTurnEnv, StepResult, user


class MagicWordConfig(BaseModel):
    """Constructor kwargs of MagicWord."""

    model_config = ConfigDict(extra="forbid")
    word: str = Field("please", min_length=1, description="The magic word the model is rewarded for saying.")
    turns: int = Field(1, ge=1, le=16, description="Assistant turns per episode (each earns its own reward).")
    num_tasks: int = Field(16, ge=1, description="Distinct task ids (prompt variants) in the task set.")
    split: Literal["train", "test"] = Field(
        "train", description="Task split: train or test (test uses other prompt variants)."
    )


def magic_word_reward(text: str, word: str) -> float:
    """1.0 if ``word`` is in ``text`` (case-insensitive), else 0.5 * share of characters drawn from the word."""
    lowered = text.lower()
    if word.lower() in lowered:
        return 1.0
    chars = [c for c in lowered if not c.isspace()]
    if not chars:
        return 0.0
    letters = set(word.lower())
    return 0.5 * sum(c in letters for c in chars) / len(chars)


class MagicWord(MultiTurnEnv):
    """Say the magic word (toy, learnable by a tiny model); reward is dense per turn."""

    max_turns = 16
    config_model = MagicWordConfig

    def __init__(
        self, word: str = "please", turns: int = 1, num_tasks: int = 16, split: Literal["train", "test"] = "train"
    ) -> None:
        self.config = MagicWordConfig(word=word, turns=turns, num_tasks=num_tasks, split=split)
        self.turn = 0
        self.task_id = ""

    def task_ids(self) -> list[str]:
        return [f"{self.config.split}-{i}" for i in range(self.config.num_tasks)]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        super().reset(seed=seed)
        self.turn = 0
        # Without a task id the episode is named by its seed; a given id must be one of the split's.
        has_id = (options or {}).get("task_id") is not None
        self.task_id = (
            self.choose_task_id(options, self.task_ids(), f"MagicWord split {self.config.split!r}")
            if has_id
            else f"seed-{seed}"
        )
        prompt = f"Task {self.task_id}: say the magic word."
        return [user(prompt)], {"task_id": self.task_id}

    def step(self, action: str) -> StepResult:
        self.turn += 1
        reward = magic_word_reward(action, self.config.word)
        info = {"reward_components": {"magic_word": reward}}
        if self.turn >= self.config.turns:
            return [], reward, True, False, info
        return [user("Say it again.")], reward, False, False, info
