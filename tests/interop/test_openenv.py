"""OpenEnv-v0 against real OpenEnv servers built with the ``openenv`` package (run in its own venv)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

from agentrl.env import restore_env
from agentrl.tools.toolcall import format_tool_call
from envs.interop.openenv_env import OpenEnvEnv
from envs.interop.openenv_wire import OpenEnvError

pytest.importorskip("websockets", reason="needs websockets: pip install 'agentrl[openenv]'")

from interop_harness import run_config, train_two_steps
from openenv_server import openenv_server

GUESS = {"action_field": "message", "observation_field": "text", "task_ids": ["1-9", "1-99"], "max_turns": 3}


@pytest.fixture(scope="module")
def guess_url() -> Iterator[str]:
    with openenv_server("guess_app") as url:
        yield url


@pytest.fixture(scope="module")
def tools_url() -> Iterator[str]:
    with openenv_server("tools_app") as url:
        yield url


def test_guess_env_maps_observations_rewards_and_done(guess_url: str) -> None:
    env = OpenEnvEnv(url=guess_url, **GUESS)
    try:
        check_env(env, skip_render_check=True)
        messages, info = env.reset(seed=3, options={"task_id": "1-9"})
        assert messages == [{"role": "user", "content": "Guess my number between 1 and 9."}]
        assert info["task_id"] == "1-9" and info["max_new_tokens"] == 3
        answers = {}
        for guess in range(1, 10):
            env.reset(seed=3, options={"task_id": "1-9"})
            observation, reward, terminated, truncated, _ = env.step(str(guess))
            answers[guess] = (observation[0]["content"], reward, terminated)
        found = [g for g, (_, reward, done) in answers.items() if reward == 1.0 and done]
        assert len(found) == 1, answers  # the seed fixes the number: one guess wins
        assert all(text in ("higher", "lower") for g, (text, _, _) in answers.items() if g not in found)
        history = restore_env(env, seed=3, options={"task_id": "1-9"}, actions=["0", "10"])
        assert [m["content"] for m in history] == ["Guess my number between 1 and 9.", "higher", "lower"]
    finally:
        env.close()


def test_tools_listed_and_called_through_step_and_rpc(tools_url: str) -> None:
    for mode in ("step", "rpc"):
        env = OpenEnvEnv(url=tools_url, tools=mode, action_field="message", observation_field="result")
        try:
            names = [s["function"]["name"] for s in env.tool_schemas()]
            assert names == ["add", "submit"]
            assert env.tool_schemas()[0]["function"]["parameters"]["required"] == ["a", "b"]
            messages, _ = env.reset(seed=1)
            a, b = (int(x) for x in messages[0]["content"].split("?")[0].split()[-3::2])
            observation, reward, terminated, _, _ = env.step(format_tool_call("add", {"a": a, "b": b}))
            assert observation[0]["role"] == "tool" and observation[0]["content"].strip() == str(a + b)
            bad, _, _, _, _ = env.step(format_tool_call("nope", {}) + "<tool_call>{x</tool_call>")
            assert all(m["content"].startswith("Error") for m in bad), bad
            if mode == "step":
                _, reward, terminated, _, _ = env.step(format_tool_call("submit", {"answer": a + b}))
                assert (reward, terminated) == (1.0, True)
        finally:
            env.close()


def test_success_is_reported_only_where_it_is_defined(guess_url: str) -> None:
    outcomes = {}
    for success_reward in (None, 1.0):
        env = OpenEnvEnv(url=guess_url, success_reward=success_reward, **GUESS)
        try:
            for guess in range(1, 10):
                env.reset(seed=3, options={"task_id": "1-9"})
                _, reward, terminated, _, info = env.step(str(guess))
                if terminated:
                    outcomes[success_reward] = (reward, info["success"])
            env.reset(seed=3, options={"task_id": "1-9"})
            cut = [env.step("0") for _ in range(3)][-1]
            assert cut[3] and not cut[4]["success"]  # truncated: never solved
        finally:
            env.close()
    # The guess env sends reward 1 on a win but no success flag: without success_reward nothing is claimed.
    assert outcomes == {None: (1.0, False), 1.0: (1.0, True)}


def test_a_full_server_names_max_concurrent_envs() -> None:
    with openenv_server("single_app") as url:
        first, second = OpenEnvEnv(url=url, **GUESS), OpenEnvEnv(url=url, **GUESS)
        try:
            first.reset(seed=0)
            with pytest.raises(OpenEnvError, match="max_concurrent_envs at least the episodes in flight") as caught:
                second.reset(seed=0)
            assert "rollout.concurrency" not in str(caught.value)
        finally:
            first.close()
            second.close()


def test_unreachable_server_names_the_fix() -> None:
    env = OpenEnvEnv(url="http://127.0.0.1:9", timeout_s=2)
    with pytest.raises(OpenEnvError, match="Start the env server"):
        env.reset(seed=0)


@pytest.mark.slow
def test_trains_two_steps_against_the_real_openenv_server(tiny_model_dir: Path, tmp_path: Path, guess_url: str) -> None:
    env = {"id": "agentrl/OpenEnv-v0", "kwargs": {"url": guess_url, **GUESS}}
    records = train_two_steps(run_config(tmp_path, tiny_model_dir, env), "openenv")
    assert all(r["episode/reward_mean"] >= 0.0 for r in records)
