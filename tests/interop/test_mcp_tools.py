"""MCP tools against a real MCP server (the SDK's MCPServer, as a stdio subprocess and over streamable HTTP)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

from agentrl.tools.mcp import McpError, McpToolSource
from agentrl.tools.toolcall import format_tool_call

pytest.importorskip("mcp", reason="needs the mcp SDK: pip install 'agentrl[mcp]'")

from interop_harness import HERE, free_port, mcp_stdio_server, run_config, stop, train_two_steps, wait_http

TASKS = [
    {"task_id": "add-1", "question": "What is 17 + 25?", "answer": 42},
    {"task_id": "capital-1", "question": "What is the capital of Peru?", "answer": "Lima"},
]


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "mcp_server.py"), "http", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/mcp", proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop(proc)


def test_stdio_tools_are_listed_called_and_errors_become_messages() -> None:
    source = McpToolSource({"server": mcp_stdio_server()})
    try:
        schemas = {s["function"]["name"]: s for s in source.schemas()}
        assert set(schemas) == {"add", "capital", "remember", "recall"}
        assert schemas["add"]["function"]["parameters"]["required"] == ["a", "b"]
        assert "title" not in json.dumps(schemas["add"]["function"]["parameters"])
        text = format_tool_call("add", {"a": 2, "b": 40}) + format_tool_call("capital", {"country": "Narnia"})
        added, failed = source.execute(text + format_tool_call("ad", {}) + "<tool_call>{oops</tool_call>")[:2]
        assert added == {"role": "tool", "content": "42", "name": "add"}
        assert failed["content"].startswith("Error:") and "Narnia" in failed["content"]
        unknown, malformed = source.execute(format_tool_call("ad", {}) + "<tool_call>{oops</tool_call>")
        assert "unknown tool 'ad'" in unknown["content"] and "Did you mean 'add'" in unknown["content"]
        assert malformed["content"].startswith("Error: the tool call is not valid JSON")
        assert source.call("add", {"a": "x"}).startswith("Error:")  # the server's validation, as a message
    finally:
        source.close()


def test_each_source_has_its_own_session_and_a_dead_server_is_an_error_then_restarts() -> None:
    first, second = McpToolSource({"server": mcp_stdio_server()}), McpToolSource({"server": mcp_stdio_server()})
    try:
        assert first.call("remember", {"key": "k", "value": "v1"}) == "ok"
        assert first.call("recall", {"key": "k"}) == "v1" and second.call("recall", {"key": "k"}) == ""
        first.call("remember", {"key": "k", "value": "v2"})
        import psutil

        def cmdline(proc: psutil.Process) -> str:  # a zombie child of an earlier test has none: not a server
            try:
                return " ".join(proc.cmdline())
            except (psutil.ZombieProcess, psutil.NoSuchProcess):
                return ""

        children = psutil.Process().children(recursive=True)
        servers = [p for p in children if "mcp_server.py" in cmdline(p)]
        assert len(servers) == 2
        for proc in servers:
            proc.kill()
        answer = first.call("recall", {"key": "k"})
        assert answer.startswith("Error:"), answer  # a dead server is a message, not an exception
        assert first.broken and first.call("add", {"a": 1, "b": 1}).startswith("Error: the tool server is unavailable")
        first.start()  # what the env's reset does: a fresh server process
        assert first.call("recall", {"key": "k"}) == ""
    finally:
        first.close()
        second.close()


def test_http_transport(http_server: str) -> None:
    source = McpToolSource({"server": {"transport": "http", "url": http_server}, "include": ["add"]})
    try:
        assert [s["function"]["name"] for s in source.schemas()] == ["add"]
        assert source.call("add", {"a": 1, "b": 2}) == "3"
        assert source.call("capital", {"country": "Peru"}).startswith("Error: unknown tool")  # not offered
    finally:
        source.close()


def test_bad_server_config_names_the_fix() -> None:
    with pytest.raises(McpError, match="nonexistent.*run it by hand"):
        McpToolSource({"server": {"transport": "stdio", "command": ["/nonexistent"]}, "timeout_s": 10}).start()


def test_env_passes_check_env_and_grades_answers(tmp_path: Path) -> None:
    from envs.interop.mcp_env import McpToolsEnv

    env = McpToolsEnv(mcp={"server": mcp_stdio_server()}, tasks=TASKS)
    try:
        check_env(env, skip_render_check=True)
        messages, info = env.reset(seed=0, options={"task_id": "add-1"})
        assert messages[-1]["content"] == "What is 17 + 25?" and info == {"task_id": "add-1"}
        assert [s["function"]["name"] for s in env.tool_schemas()][0] == "add"
        observation, reward, terminated, *_ = env.step(format_tool_call("add", {"a": 17, "b": 25}))
        assert observation == [{"role": "tool", "content": "42", "name": "add"}] and not terminated
        _, reward, terminated, _, info = env.step("Answer: 42")
        assert (reward, terminated, info["success"]) == (1.0, True, True)
    finally:
        env.close()


def test_fresh_session_clears_server_state_between_episodes() -> None:
    from envs.interop.mcp_env import McpToolsEnv

    remember, recall = (
        format_tool_call("remember", {"key": "k", "value": "v"}),
        format_tool_call("recall", {"key": "k"}),
    )
    for fresh, expected in ((False, "v"), (True, "")):
        env = McpToolsEnv(mcp={"server": mcp_stdio_server()}, tasks=TASKS, fresh_session=fresh)
        try:
            env.reset(seed=0, options={"task_id": "add-1"})
            env.step(remember)
            env.reset(seed=0, options={"task_id": "add-1"})
            assert env.step(recall)[0][0]["content"] == expected
        finally:
            env.close()


@pytest.mark.slow
def test_trains_two_steps_against_the_real_mcp_server(tiny_model_dir: Path, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    env = {"id": "agentrl/McpTools-v0", "kwargs": {"mcp": {"server": mcp_stdio_server()}, "tasks": str(tasks)}}
    records = train_two_steps(run_config(tmp_path, tiny_model_dir, env), "mcp")
    assert all("episode/reward_mean" in r for r in records)
