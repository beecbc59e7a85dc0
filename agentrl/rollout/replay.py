"""Restoring the environment of a partial episode loaded from the buffer.

See docs/design.md#restoring-an-environment-mid-episode.

``env.restore(snapshot)`` when the episode stored a snapshot, else deterministic replay of the
recorded actions, verified against the recorded env messages. An env that cannot be restored
(replayable=False and no snapshot, replay divergence, an exception) restarts the episode from
scratch: across jobs there is no live env state to resume from a turn boundary.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from agentrl.env import restore_env
from agentrl.errors import RolloutError
from agentrl.trajectory import Episode


@dataclass(frozen=True)
class RestoreOutcome:
    """How an env was brought back: snapshot, replay, or restart (with the reason)."""

    method: Literal["snapshot", "replay", "restart"]
    reason: str = ""


def as_recorded(value: Any) -> Any:
    """``value`` after a JSON round trip: how the runner records env output (messages, info, snapshots).

    Replay compares the env's new output in this same form, so both sides must use this function.
    """
    return json.loads(json.dumps(value, default=str))


def stepped_turns(episode: Episode) -> list[int]:
    """Indices of turns whose action the env already received (their reward is recorded)."""
    return [i for i, turn in enumerate(episode.turns) if turn.reward is not None]


def restore_episode_env(env: Any, episode: Episode) -> RestoreOutcome:
    """Bring ``env`` to the state of ``episode``'s last turn boundary; never raises for env faults."""
    turns = [episode.turns[i] for i in stepped_turns(episode)]
    snapshot = episode.env_snapshot if turns else None
    try:
        history = restore_env(
            env, seed=episode.seed, options=episode.reset_options, actions=[t.action for t in turns], snapshot=snapshot
        )
    except RolloutError as exc:
        return RestoreOutcome("restart", str(exc))
    except Exception as exc:  # an env's own failure while replaying: the episode restarts, recorded
        return RestoreOutcome("restart", f"env raised {type(exc).__name__} while restoring: {exc}")
    if snapshot is not None:
        return RestoreOutcome("snapshot")
    replayed = as_recorded(history)
    recorded_env = as_recorded([m for t in turns for m in t.env_messages])
    opening_count = len(replayed) - len(recorded_env)
    if opening_count < 0 or replayed[opening_count:] != recorded_env:
        return RestoreOutcome(
            "restart", "replayed env messages differ from the recorded ones (the env is not deterministic)"
        )
    if replayed[:opening_count] != as_recorded(episode.messages[:opening_count]):
        return RestoreOutcome(
            "restart", "replayed opening messages differ from the recorded ones (the env is not deterministic)"
        )
    return RestoreOutcome("replay")
