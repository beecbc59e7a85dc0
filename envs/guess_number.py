"""GuessNumber: find a hidden number; the env answers 'higher' or 'lower'. The one-file sample env."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentrl.env import Message, MultiTurnEnv, StepResult, user


class GuessNumberConfig(BaseModel):
    """Constructor kwargs of GuessNumber."""

    model_config = ConfigDict(extra="forbid")
    max_value: int = Field(100, ge=2, description="The hidden number is drawn from 1..max_value.")


class GuessNumber(MultiTurnEnv):
    """Find a hidden number in 1..max_value; the env answers 'higher' or 'lower'."""

    max_turns = 7
    config_model = GuessNumberConfig

    def __init__(self, max_value: int = 100) -> None:
        self.config = GuessNumberConfig(max_value=max_value)
        self.target = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        super().reset(seed=seed)
        self.target = int(self.np_random.integers(1, self.config.max_value + 1))
        prompt = f"I picked a number from 1 to {self.config.max_value}. Guess it; answer with the number only."
        return [user(prompt)], {}

    def step(self, action: str) -> StepResult:
        match = re.fullmatch(r"\s*(\d{1,9})\s*", action, flags=re.ASCII)
        guess = int(match.group(1)) if match else None
        if guess == self.target:
            return [], 1.0, True, False, {"valid_guess": True}
        hint = "Not a number." if guess is None else ("higher" if guess < self.target else "lower")
        return [user(hint)], 0.0, False, False, {"valid_guess": guess is not None}
