"""The multi-turn environment contract: a real ``gymnasium.Env`` whose actions and observations are text.

``reset`` returns the opening chat messages; ``step(action_text)`` returns the messages the
environment adds, the turn's reward, and the usual terminated/truncated/info. Environments that
are deterministic given (seed, options, actions) can be restored mid-episode by replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, SupportsFloat

import gymnasium as gym
from pydantic import BaseModel

from agentrl.errors import RolloutError
from agentrl.spaces import MessageList, UnicodeText

Message = dict[str, Any]
StepResult = tuple[list[Message], SupportsFloat, bool, bool, dict[str, Any]]

HACK_FLAGS = "hack_flags"
"""Info key of ``step`` (``list[str]``): signals of attempted reward hacking seen in this turn, each
``"<kind>: <detail>"`` (e.g. ``"introspection: sys._getframe"``). The rollout records them on the turn and
the episode (``Episode.hack_flags``), counts ``reward/hack_suspect_frac`` and ``agentrl inspect`` shows
them; the env decides whether a flag also costs reward. Any env that grades untrusted output may set it."""


def hack_flags(info: dict[str, Any]) -> list[str]:
    """The hack flags of a step's ``info`` (``[]`` when absent); a malformed value is an env bug, named here."""
    flags = info.get(HACK_FLAGS, [])
    if not isinstance(flags, list) or not all(isinstance(flag, str) for flag in flags):
        raise RolloutError(
            f"info[{HACK_FLAGS!r}] must be a list of 'kind: detail' strings, got {flags!r:.200}; fix the env's step()"
        )
    return flags


def system(content: str) -> Message:
    """A system chat message."""
    return {"role": "system", "content": content}


def user(content: str) -> Message:
    """A user chat message."""
    return {"role": "user", "content": content}


def assistant(content: str) -> Message:
    """An assistant chat message."""
    return {"role": "assistant", "content": content}


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
    * ``reset(seed=..., options={"task_id": ...})`` starts the task ``task_id`` when the env has
      a task set (``task_ids()``); call ``super().reset(seed=seed)`` first to seed ``np_random``;
    * ``max_turns``: the rollout stops the episode (truncated) after this many assistant turns;
    * ``tools``: plain typed Python functions the model may call (see ``agentrl.tools``);
    * ``config_model``: optional pydantic model of the constructor kwargs, checked before a run starts;
    * ``replayable``: True when (seed, options, recorded actions) reproduce the env state, which
      is how partial episodes are restored in a later job unless ``snapshot``/``restore`` exist.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}
    max_turns: ClassVar[int] = 8
    replayable: ClassVar[bool] = True
    tools: ClassVar[tuple[Any, ...]] = ()
    config_model: ClassVar[type[BaseModel] | None] = None

    action_space = UnicodeText()
    observation_space = MessageList()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Seed ``np_random``; subclasses call this first, then return the opening messages and info."""
        super().reset(seed=seed)
        return [], {}

    def step(self, action: str) -> StepResult:
        """Apply the assistant's text; returns (new messages, reward, terminated, truncated, info)."""
        raise NotImplementedError(f"{type(self).__name__} must implement step(action: str)")

    def task_ids(self) -> list[str]:
        """Ids of this env's tasks for the configured split; [] when tasks are seeds only."""
        return []

    def tool_schemas(self) -> list[dict[str, Any]]:
        """JSON schemas (OpenAI/Qwen function format) of ``tools``, for the chat template."""
        from agentrl.tools import as_tool  # lazy: agentrl.tools builds on this module's helpers

        return [as_tool(fn).schema for fn in self.tools]

    def preflight(self) -> list[str]:
        """Check the external resources this env needs (sandboxes, services) without running an episode.

        Returns one line per thing checked (``agentrl train --dry-run`` prints them); raises an
        ``AgentRLError`` (or the resource's own error) that names the fix when something is unusable.
        """
        return []

    def snapshot(self) -> Any:
        """A JSON-able snapshot of the env state, or None to rely on deterministic replay."""
        return None

    def restore(self, snapshot: Any) -> None:
        """Restore a state produced by ``snapshot`` (only called when ``snapshot`` returned non-None)."""
        raise NotImplementedError(f"{type(self).__name__} returned a snapshot but does not implement restore()")


def restore_env(
    env: MultiTurnEnv,
    *,
    seed: int | None,
    options: dict[str, Any] | None,
    actions: Sequence[str] = (),
    snapshot: Any = None,
) -> list[Message]:
    """Bring ``env`` to the state after ``actions``: ``restore(snapshot)`` if given, else replay.

    Returns the messages the replay produced (opening messages then each step's messages), so a
    caller can check them against the recorded chat. Raises ``RolloutError`` when the env can do
    neither (``replayable = False`` and no snapshot) or the replay ends early; the rollout then
    restarts the episode from scratch (``agentrl.rollout.replay``).
    """
    base = env.unwrapped
    messages, _ = env.reset(seed=seed, options=options)
    if snapshot is not None:
        base.restore(snapshot)  # type: ignore[attr-defined]
        return list(messages)
    if actions and not getattr(base, "replayable", False):
        raise RolloutError(
            f"environment {type(base).__name__} has replayable=False and no snapshot, so it cannot be "
            f"restored after {len(actions)} turn(s); implement snapshot()/restore() or restart the episode"
        )
    history = list(messages)
    for index, action in enumerate(actions):
        new_messages, _, terminated, truncated, _ = env.step(action)
        history.extend(new_messages)
        if (terminated or truncated) and index < len(actions) - 1:
            raise RolloutError(
                f"replaying {type(base).__name__} ended after {index + 1} of {len(actions)} recorded turns: "
                "the env is not deterministic given (seed, options, actions); set replayable = False or add "
                "snapshot()/restore()"
            )
    return history
