"""McpTools-v0 with the official ``mcp-server-time`` from PyPI, run from its own venv (its own ``mcp``) over stdio."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gymnasium.utils.env_checker import check_env
from interop_harness import run_config, train_two_steps
from thirdparty_env import component

from agentrl.tools.toolcall import format_tool_call
from envs.interop.mcp_env import McpToolsEnv

pytest.importorskip("mcp", reason="needs the MCP SDK: pip install 'agentrl[mcp]'")
# Asia/Tokyo has no daylight saving time, so the answer does not depend on the date the test runs.
TASKS = [{"task_id": "tokyo", "question": "When it is 03:00 in UTC, what hour is it in Asia/Tokyo?", "answer": 12}]


def server() -> dict[str, Any]:
    """The server as its users run it: the venv's own console script, a command in the env config."""
    command = str(component("mcp-time") / "bin" / "mcp-server-time")
    return {"transport": "stdio", "command": [command, "--local-timezone", "UTC"]}


def test_time_server_tools_right_and_wrong_answers_and_one_error_prefix() -> None:
    env = McpToolsEnv(mcp={"server": server()}, tasks=TASKS)
    try:
        check_env(env, skip_render_check=True)
        assert [s["function"]["name"] for s in env.tool_schemas()] == ["get_current_time", "convert_time"]
        env.reset(options={"task_id": "tokyo"})
        call = {"source_timezone": "UTC", "time": "03:00", "target_timezone": "Asia/Tokyo"}
        (observation,), reward, terminated, _, info = env.step(format_tool_call("convert_time", call))
        assert '"datetime": ' in observation["content"] and "T12:00:00+09:00" in observation["content"]
        assert (reward, terminated, info["tool_errors"]) == (0.0, False, 0)
        bad = {**call, "source_timezone": "Mars/Base"}
        (error,), *_, info = env.step(format_tool_call("convert_time", bad))
        # The SDK's own text starts "Error executing tool ...": the model sees one prefix, not "Error: Error ...".
        assert error["content"].startswith("Error: executing tool convert_time: Invalid timezone"), error
        assert info["tool_errors"] == 1
        _, reward, terminated, _, info = env.step("Answer: 12")
        assert (reward, terminated, info["success"]) == (1.0, True, True)
        env.reset(options={"task_id": "tokyo"})
        _, reward, terminated, _, info = env.step("Answer: 11")
        assert (reward, terminated, info["success"]) == (0.0, True, False)
    finally:
        env.close()


@pytest.mark.slow
def test_trains_two_steps_with_the_time_server(tiny_model_dir: Path, tmp_path: Path) -> None:
    env = {"id": "agentrl/McpTools-v0", "kwargs": {"mcp": {"server": server()}, "tasks": TASKS}}
    records = train_two_steps(run_config(tmp_path, tiny_model_dir, env), "mcp-time")
    assert all(0.0 <= r["episode/reward_mean"] <= 1.0 for r in records)
