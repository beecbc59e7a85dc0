"""Checks of what an environment returns, where it enters the rollout (the contract of ``agentrl.env``).

``checked_reset`` and ``checked_step`` hand back the values in the form the runner records (a list
of message dicts, a finite float reward, bool flags, a dict info whose ``EnvInfo`` keys have their
types) or raise ``EnvContractError`` naming the env class, the method, what it returned and what it
must return. A wrong return thus fails its own episode with that message, never later as
a confusing template, buffer or trainer error.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentrl.chat.messages import Message
from agentrl.env.spaces import ROLES
from agentrl.errors import EnvContractError

RESET_SHAPE = "a tuple (messages, info): a list of chat messages such as [user('...')] and a dict"
STEP_SHAPE = (
    "a tuple (messages, reward, terminated, truncated, info): a list of chat messages (may be empty), "
    "a float, two bools and a dict"
)


@dataclass(frozen=True)
class StepReturn:
    """One validated ``step`` result."""

    messages: list[Message]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


def _shown(value: Any) -> str:
    """``'text...' (a str)``: a short repr plus the type, for error messages."""
    text = repr(value)
    text = text if len(text) <= 120 else f"{text[:117]}..."
    return f"{text} (a {type(value).__name__})"


def _is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not _is_bool(value)


def message_problem(value: Any) -> str | None:
    """Why ``value`` is not a list of chat messages, or None when it is one."""
    if not isinstance(value, (list, tuple)):
        return f"the observation is {_shown(value)}, not a list of chat messages"
    for index, message in enumerate(value):
        if not isinstance(message, Mapping):
            return f"message {index} is {_shown(message)}, not a dict with 'role' and 'content'"
        if message.get("role") not in ROLES:
            return f"message {index} has role {message.get('role')!r}; roles are {', '.join(ROLES)}"
        if not isinstance(message.get("content"), str):
            return f"message {index} has content {_shown(message.get('content'))}; content must be a str"
    return None


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


def _components_ok(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(k, str) and _is_number(v) for k, v in value.items())


# What each EnvInfo key must hold (None means "not set" for the optional ones the runner already treats so).
_INFO_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "success": (_is_bool, "a bool"),
    "reward_components": (_components_ok, "a dict of {name: float}"),
    "outcome": (_optional(lambda v: _is_number(v) and math.isfinite(v)), "a finite float or None"),
    "max_new_tokens": (
        _optional(lambda v: isinstance(v, numbers.Integral) and not _is_bool(v) and v >= 1),
        "an int >= 1 or None",
    ),
    "sandbox_time_s": (_optional(lambda v: _is_number(v) and v >= 0), "a float >= 0 or None"),
    "action": (_optional(lambda v: isinstance(v, str)), "a str (run, submit, none, invalid) or None"),
    "run_failed": (_optional(_is_bool), "a bool or None"),
    "code_ran": (_optional(_is_bool), "a bool or None"),
    "canary": (_is_bool, "a bool"),
    "hack_flags": (
        lambda v: isinstance(v, list) and all(isinstance(flag, str) for flag in v),
        "a list of 'kind: detail' strings",
    ),
}


def info_problem(info: Any) -> str | None:
    """Why ``info`` breaks the contract (not a dict, or an ``EnvInfo`` key of the wrong type), or None."""
    if not isinstance(info, Mapping):
        return f"info is {_shown(info)}, not a dict"
    for key, (check, wanted) in _INFO_CHECKS.items():
        if key in info and not check(info[key]):
            return f"info[{key!r}] is {_shown(info[key])}; it must be {wanted} (see agentrl.env.EnvInfo)"
    return None


def _fail(env: Any, method: str, problem: str, shape: str) -> EnvContractError:
    name = type(getattr(env, "unwrapped", env)).__name__
    return EnvContractError(f"{name}.{method} broke the env contract: {problem}; {method} must return {shape}")


def checked_reset(env: Any, value: Any) -> tuple[list[Message], dict[str, Any]]:
    """``env.reset``'s return value ``value`` as (messages, info); EnvContractError when it has another shape."""
    if not isinstance(value, tuple) or len(value) != 2:
        raise _fail(env, "reset", f"it returned {_shown(value)}", RESET_SHAPE)
    messages, info = value
    problem = message_problem(messages) or info_problem(info)
    if problem is not None:
        raise _fail(env, "reset", problem, RESET_SHAPE)
    return [dict(m) for m in messages], dict(info)


def checked_step(env: Any, value: Any) -> StepReturn:
    """``env.step``'s return value ``value`` as a ``StepReturn``; EnvContractError when it has another shape."""
    if not isinstance(value, tuple) or len(value) != 5:
        hint = " (old gym's 4-tuple: split done into terminated and truncated)" if isinstance(value, tuple) else ""
        raise _fail(env, "step", f"it returned {_shown(value)}{hint}", STEP_SHAPE)
    messages, reward, terminated, truncated, info = value
    problem = message_problem(messages) or info_problem(info)
    if problem is None and not (_is_number(reward) and math.isfinite(reward)):
        problem = f"the reward is {_shown(reward)}, not a finite float"
    if problem is None and not (_is_bool(terminated) and _is_bool(truncated)):
        problem = f"terminated/truncated are {_shown(terminated)}/{_shown(truncated)}, not bools"
    if problem is not None:
        raise _fail(env, "step", problem, STEP_SHAPE)
    return StepReturn([dict(m) for m in messages], float(reward), bool(terminated), bool(truncated), dict(info))


CANNED_ACTION = "I am not sure yet."  # any text is a valid action: envs must never raise on model text


def raised_at(exc: BaseException) -> str:
    """'File "/path/my_envs.py", line 42, in _grade': where ``exc`` was raised (the innermost frame)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "no traceback"
    frame = frames[-1]
    return f'File "{frame.filename}", line {frame.lineno}, in {frame.name}'


def probe_turn(env: Any, task_id: str, seed: int | None) -> str:
    """Reset ``env`` on ``task_id`` and step it once with ``CANNED_ACTION``, checking both returns.

    What ``agentrl train --dry-run`` runs, so a broken env fails in seconds, not silently mid-run.
    Returns a one-line summary; raises EnvContractError (a raise in reset or step included).
    """
    name = type(getattr(env, "unwrapped", env)).__name__
    try:
        messages, _ = checked_reset(env, env.reset(seed=seed, options={"task_id": task_id}))
    except EnvContractError:
        raise
    except Exception as exc:
        raise EnvContractError(
            f"{name}.reset(seed={seed}, options={{'task_id': {task_id!r}}}) raised {type(exc).__name__}: {exc} "
            f"({raised_at(exc)}); "
            f"reset must return {RESET_SHAPE}"
        ) from exc
    try:
        result = checked_step(env, env.step(CANNED_ACTION))
    except EnvContractError:
        raise
    except Exception as exc:
        raise EnvContractError(
            f"{name}.step({CANNED_ACTION!r}) raised {type(exc).__name__}: {exc} ({raised_at(exc)}); step must "
            f"return {STEP_SHAPE} for any "
            "text (answer malformed output with a message and a reward, never an exception)"
        ) from exc
    return (
        f"one turn of task {task_id!r}: reset gave {len(messages)} message(s); step({CANNED_ACTION!r}) gave "
        f"{len(result.messages)} message(s), reward {result.reward:g}, terminated {result.terminated}"
    )
