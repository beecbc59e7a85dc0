"""The multi-turn environment contract: a real ``gymnasium.Env`` whose actions and observations are text.

``reset`` returns the opening chat messages; ``step(action_text)`` returns the messages the
environment adds, the turn's reward, and the usual terminated/truncated/info. Environments that
are deterministic given (seed, options, actions) can be restored mid-episode by replay.
"""

from __future__ import annotations

from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym

from agentrl.spaces import MessageList, UnicodeText

Message = dict[str, Any]


def system(content: str) -> Message:
    """A system chat message."""
    return {"role": "system", "content": content}


def user(content: str) -> Message:
    """A user chat message."""
    return {"role": "user", "content": content}


def tool(content: str, name: str | None = None) -> Message:
    """A tool-result chat message."""
    message: Message = {"role": "tool", "content": content}
    if name is not None:
        message["name"] = name
    return message


class MultiTurnEnv(gym.Env[list[Message], str]):
    """Base class of agentrl environments (subclass it; override ``reset`` and ``step``).

    * action: the assistant's text for one turn (``str``, any Unicode);
    * observation: the list of new chat messages (``{"role", "content"}`` dicts) the env adds;
    * ``max_turns``: the rollout stops the episode (truncated) after this many assistant turns;
    * ``tools``: plain typed Python functions the model may call (schemas derived from signatures);
    * ``replayable``: True when (seed, options, recorded actions) reproduce the env state, which
      is how partial episodes are restored in a later job unless ``snapshot``/``restore`` exist.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    max_turns: ClassVar[int] = 8
    replayable: ClassVar[bool] = True
    tools: ClassVar[tuple[Any, ...]] = ()

    action_space = UnicodeText()
    observation_space = MessageList()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode; returns the opening messages and info."""
        super().reset(seed=seed)
        raise NotImplementedError(f"{type(self).__name__} must implement reset()")

    def step(self, action: str) -> tuple[list[Message], SupportsFloat, bool, bool, dict[str, Any]]:
        """Apply the assistant's text; returns (new messages, reward, terminated, truncated, info)."""
        raise NotImplementedError(f"{type(self).__name__} must implement step()")

    def snapshot(self) -> Any:
        """A JSON-able snapshot of the env state, or None to rely on deterministic replay."""
        return None

    def restore(self, snapshot: Any) -> None:
        """Restore a state produced by ``snapshot`` (only called when ``snapshot`` returned non-None)."""
        raise NotImplementedError(f"{type(self).__name__} returned a snapshot but does not implement restore()")
