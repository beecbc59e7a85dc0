"""BFCL-MultiTurn-v0 at its limits: BFCL's step limit, agentrl's reply limit, a simulated API call that never ends."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from bfcl_harness import require_bfcl

from agentrl.env.registry import make_env
from agentrl.tools.toolcall import format_tool_call
from envs.interop.bfcl.env import BfclMultiTurnEnv


@pytest.fixture
def make() -> Iterator[Callable[..., BfclMultiTurnEnv]]:
    require_bfcl()
    made: list[BfclMultiTurnEnv] = []

    def build(**kwargs: object) -> BfclMultiTurnEnv:
        env = make_env("agentrl/BFCL-MultiTurn-v0", split="all", **kwargs)
        assert isinstance(env, BfclMultiTurnEnv)
        made.append(env)
        return env

    yield build
    for env in made:
        env.close()


def test_more_calling_steps_than_bfcl_allows_fail_the_entry(make: Callable[..., BfclMultiTurnEnv]) -> None:
    env = make()
    env.reset(options={"task_id": "multi_turn_base_0"})
    limit = int(env.bridge.hello["max_steps"])
    assert limit == 20  # BFCL's MAXIMUM_STEP_LIMIT
    for _ in range(limit):
        messages, reward, terminated, truncated, info = env.step(format_tool_call("pwd", {}))
        assert (
            not terminated and not truncated and messages[0]["content"] == '{"current_working_directory": "/workspace"}'
        )
    _, reward, terminated, truncated, info = env.step(format_tool_call("pwd", {}))
    assert terminated and not truncated and info["outcome"] == 0.0 and info["success"] is False
    assert "more than 20 steps" in info["bfcl_error"]


def test_running_out_of_replies_is_an_unfinished_entry(make: Callable[..., BfclMultiTurnEnv]) -> None:
    env = make(max_turns=2)
    env.reset(options={"task_id": "multi_turn_base_0"})
    assert env.step(format_tool_call("cd", {"folder": "document"}))[3] is False
    _, reward, terminated, truncated, info = env.step(format_tool_call("ls", {}))
    assert (terminated, truncated, info["outcome"], info["success"]) == (False, True, 0.0, False)


def test_a_call_that_never_ends_fails_the_episode_not_the_env(make: Callable[..., BfclMultiTurnEnv]) -> None:
    """MathAPI.logarithm at 10 million digits runs for minutes: the worker is killed, the next episode runs."""
    env = make(timeout_s=3.0)
    env.reset(options={"task_id": "multi_turn_base_15"})
    stuck = format_tool_call("logarithm", {"value": 2.0, "base": 3.0, "precision": 10_000_000})
    messages, reward, terminated, truncated, info = env.step(stuck)
    assert terminated and info["outcome"] == 0.0 and info["success"] is False
    assert messages[0]["content"].startswith("Error during execution: the BFCL worker did not answer 'execute'")
    env.reset(options={"task_id": "multi_turn_base_15"})
    messages, *_ = env.step(format_tool_call("add", {"a": 1.0, "b": 2.0}))
    assert messages[0]["content"] == '{"result": 3.0}'
