"""AgentGateway-v0 as a plain Gymnasium env (scripted replies, no model): check_env, the HTTP surface an agent
sees, subprocess agents, and stopping agents that hang."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import gateway_agents
import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401 - registers agentrl/AgentGateway-v0
from agentrl.env.registry import make_env
from agentrl.errors import AgentGatewayError
from agentrl.gateway.env import AgentGatewayEnv
from agentrl.tools.toolcall import format_tool_call

HERE = Path(__file__).resolve().parent
TASKS = [{"task_id": "mul-6-7", "question": "What is 6 x 7?", "answer": 42}]
ASK = [{"role": "system", "content": gateway_agents.SYSTEM}, {"role": "user", "content": "What is 6 x 7?"}]


def test_the_env_passes_check_env_and_plays_a_scripted_exchange() -> None:
    env = gym.make("agentrl/AgentGateway-v0", agent="gateway_agents:calc_agent", tasks=TASKS).unwrapped
    try:
        check_env(env, skip_render_check=True)
        messages, info = env.reset(seed=1, options={"task_id": "mul-6-7"})
        note = "temperature=0.7 overridden by the run's sampling"
        assert messages == ASK and info == {"gateway": {"history": "opening", "notes": [note]}, "max_new_tokens": 40}
        observation, reward, terminated, _, info = env.step(format_tool_call("multiply", {"a": 6, "b": 7}))
        assert observation == [{"role": "tool", "content": "42", "tool_call_id": "call_0_0"}]
        assert (reward, terminated, info["gateway"]) == (0.0, False, {"history": "extended", "notes": [note]})
        assert env.step("42")[1:3] == (1.0, True)
        with pytest.raises(Exception, match="call reset\\(\\) first"):
            env.step("again")
    finally:
        env.close()


def test_what_an_agent_sees_over_http() -> None:
    gateway_agents.RECEIVED.clear()
    env = make_env(
        "agentrl/AgentGateway-v0", agent="gateway_agents:probing_agent", tasks=[{"task_id": "p", "question": "Q"}]
    )
    try:
        messages, _ = env.reset(options={"task_id": "p"})  # the first well-formed call
        assert messages == [{"role": "user", "content": "Q"}]
        pending = env.conversation.pending
        while pending.requests < 2:  # the agent sends it twice at once; the second joins the first
            time.sleep(0.01)
        observation, *_ = env.step("hello")  # answers it and its retry at once
        assert observation[-1]["content"] in ("x", "y")
        while "conflict" not in gateway_agents.RECEIVED["p"]:  # the other racing request was refused
            time.sleep(0.01)
        assert env.step("bye")[1:3] == (1.0, True)
    finally:
        env.close()
    seen = gateway_agents.RECEIVED["p"]
    assert "n=2 is not supported" in seen["n"] and "ends with an assistant message (a prefill)" in seen["prefill"]
    assert seen["models"] == ["agentrl-policy"] and seen["retry_joined"]
    [(completions, served), (wrong_key, key_msg), (unknown, gone)] = seen["http"]
    assert completions == 404 and "serves GET /models and POST /chat/completions" in served
    assert wrong_key == 401 and "wrong API key" in key_msg
    assert unknown == 404 and "no episode at this URL" in gone
    assert "already has a request in flight" in seen["conflict"]
    [answered] = seen["race"]
    assert answered.choices[0].message.content == "bye"


@pytest.mark.parametrize("task_input", ["stdin", "argv"])
def test_a_subprocess_agent_with_openai_base_url(tmp_path: Path, task_input: str) -> None:
    command = [sys.executable, str(HERE / "calc_agent_cli.py"), *(["--argv"] if task_input == "argv" else [])]
    env = AgentGatewayEnv(
        agent={"kind": "command", "command": command, "task_input": task_input, "env": {"PYTHONPATH": str(HERE)}},
        tasks=TASKS,
    )
    try:
        messages, _ = env.reset()
        assert messages == ASK
        observation, *_ = env.step(format_tool_call("multiply", {"a": 6, "b": 7}))
        assert observation[0]["content"] == "42"
        _, reward, terminated, _, info = env.step("42")
        assert (reward, terminated, info) == (1.0, True, {"reward_components": {"correct": 1.0}})
    finally:
        env.close()


def test_a_subprocess_agent_without_a_reward_line_fails_with_its_output() -> None:
    env = AgentGatewayEnv(agent=[sys.executable, "-c", "print('no reward here')"], tasks=TASKS)
    with pytest.raises(AgentGatewayError, match="ended before its first model call.*last line: 'no reward here'"):
        env.reset()
    env.close()


def test_a_hanging_agent_times_out_and_closing_stops_agents(tmp_path: Path) -> None:
    env = AgentGatewayEnv(agent="gateway_agents:sleepy_agent", tasks=TASKS, turn_timeout_s=1.0)
    env.reset()
    conversation = env.conversation
    assert conversation is not None
    with pytest.raises(AgentGatewayError, match="did not return within 1 s of its last reply"):
        env.step("ok")  # the agent hangs: no next request, no return
    started = time.monotonic()
    env.close()
    assert time.monotonic() - started < 5 and conversation._agent_done.is_set()
    pids = tmp_path / "pids"
    pids.mkdir()
    cli = AgentGatewayEnv(
        agent={
            "kind": "command",
            "command": [sys.executable, str(HERE / "calc_agent_cli.py")],
            "env": {"PYTHONPATH": str(HERE), "AGENTRL_TEST_PIDS": str(pids)},
        },
        tasks=TASKS,
    )
    cli.reset()  # the program now waits for its first reply
    [pid] = [int(p.name) for p in pids.iterdir()]
    cli.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
