"""OpenEnv environment servers for the interop tests, written against the ``openenv`` package (its own venv).

``guess``: find a seeded hidden number; text actions (``message``), reward 1 when found.
``tools``: an MCPEnvironment whose tools are ``add`` and ``submit``; ``submit`` ends the episode with reward.
Serve with ``uvicorn openenv_app:guess_app`` / ``openenv_app:tools_app`` from this folder.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

from fastmcp import FastMCP
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

MARKERS = os.environ.get("OPENENV_TEST_MARKERS")  # a file per step, so a test can time a kill


class GuessAction(Action):
    """The assistant's text."""

    message: str = Field(..., description="The guess, as text.")


class GuessObservation(Observation):
    """What the env says back."""

    text: str = Field("", description="The env's answer.")


class GuessEnvironment(Environment):
    """Seeded number guessing: 'higher' / 'lower' until found (max 3 steps before the caller truncates)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        self._state = State(step_count=0)
        self.target = self.high = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str = "1-9", **kwargs: Any):
        low, high = (int(x) for x in task_id.split("-"))
        self.high = high
        self.target = random.Random(seed).randint(low, high)
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(text=f"Guess my number between {low} and {high}.", reward=0.0, metadata=self._cap())

    def _cap(self) -> dict[str, Any]:
        """Wide ranges ask for long replies after their first step: the heavy tail partial rollouts cut, with an
        env step already taken (so a restored episode needs its env rebuilt)."""
        return {"max_new_tokens": 200 if self.high > 50 and self._state.step_count >= 1 else 3}

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        if MARKERS:
            Path(MARKERS).mkdir(parents=True, exist_ok=True)
            (Path(MARKERS) / f"{os.getpid()}-{random.random()}").touch()
        found = re.search(r"-?\d+", action.message)
        if found is None:
            return GuessObservation(text="Not a number.", reward=0.0, metadata=self._cap())
        guess = int(found.group())
        if guess == self.target:
            return GuessObservation(text="Correct!", reward=1.0, done=True)
        return GuessObservation(text="higher" if guess < self.target else "lower", reward=0.0, metadata=self._cap())

    @property
    def state(self) -> State:
        return self._state


class ToolsEnvironment(MCPEnvironment):
    """Answer 'what is A + B?' with the add tool, then submit; reward 1 for the right submission."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("agentrl-openenv-tools")
        self.expected = 0

        @mcp.tool()
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        @mcp.tool()
        def submit(answer: int) -> str:
            """Submit the final answer."""
            return "submitted"

        super().__init__(mcp)
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Observation:
        rng = random.Random(seed)
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        self.expected = a + b
        self._state = State(episode_id=episode_id, step_count=0)
        return CallToolObservation(tool_name="", result=f"What is {a} + {b}? Use add, then submit.", reward=0.0)

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        self._state.step_count += 1
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction) and action.tool_name == "submit":
            correct = int(action.arguments.get("answer", -1)) == self.expected
            observation.reward, observation.done = float(correct), True
        return observation

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return CallToolObservation(tool_name="", result="only tool calls are accepted", reward=0.0)

    @property
    def state(self) -> State:
        return self._state


guess_app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=64)
tools_app = create_app(ToolsEnvironment, CallToolAction, CallToolObservation, env_name="tools", max_concurrent_envs=64)
# One session only: the capacity test fills it.
single_app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess1", max_concurrent_envs=1)
