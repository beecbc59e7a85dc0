"""docs/interop.md: every example runs as written, against the real outside component."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "interop.md"
sys.path.insert(0, str(ROOT / "tests" / "interop"))

from interop_harness import free_port, stop, wait_http  # noqa: E402


def doc_files() -> dict[str, str]:
    """The doc's ```python blocks that open with ``# file: NAME``, by name."""
    blocks = re.findall(r"^```python\n# file: (\S+)\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.DOTALL | re.M)
    return dict(blocks)


@pytest.fixture()
def workdir(tmp_path: Path) -> Path:
    for name, source in doc_files().items():
        (tmp_path / name).write_text(source, encoding="utf-8")
    return tmp_path


def run(workdir: Path, script: str, **env: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, script],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(workdir), **env},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def test_every_adapter_has_an_example() -> None:
    examples = {"try_mcp.py", "try_mcp_in_my_env.py", "try_openenv.py", "try_harbor.py", "try_verifiers.py"}
    assert examples | {"my_agent.py", "try_gateway.py"} <= set(doc_files())


def test_mcp_examples(workdir: Path) -> None:
    pytest.importorskip("mcp")
    assert run(workdir, "try_mcp.py") == [
        "['multiply']",
        "[{'role': 'tool', 'content': '42', 'name': 'multiply'}]",
        "Error: unknown tool 'divide'. Available tools: multiply.",
        "1.0 True",
    ]
    assert run(workdir, "try_mcp_in_my_env.py") == ["42"]


def test_openenv_example(workdir: Path) -> None:
    pytest.importorskip("websockets")
    from openenv_server import openenv_python

    port = free_port()
    cmd = [str(openenv_python()), "-m", "uvicorn", "counter_server:app", "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(cmd, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", server, timeout_s=120)
        assert run(workdir, "try_openenv.py", OPENENV_URL=f"http://127.0.0.1:{port}") == [
            "[{'role': 'user', 'content': 'Pick a number from 1 to 5.'}]",
            "([{'role': 'user', 'content': 'higher'}], 0.0, False)",
            "([{'role': 'user', 'content': 'Yes!'}], 1.0, True)",
        ]
    finally:
        stop(server)


@pytest.mark.docker
def test_harbor_example(workdir: Path) -> None:
    from sandboxes import docker_available

    if not docker_available():
        pytest.skip("no Docker engine with the sandbox image (run scripts/docker_setup.sh)")
    lines = run(workdir, "try_harbor.py")
    assert lines[0] == "['count-lines', 'fix-add', 'write-greeting']"
    assert lines[1:3] == ["Output:", "[exit code 0]"] and lines[-1] == "1.0 True"


def test_verifiers_example(workdir: Path) -> None:
    pytest.importorskip("verifiers.v1")
    assert run(workdir, "try_verifiers.py") == [
        "['add-0-0', 'add-0-1', 'add-0-2']",
        "[{'role': 'user', 'content': 'What is 1 + 2? Reply with the number.'}]",
        "1.0 True {'correct': 1.0}",
    ]


def test_gateway_example(workdir: Path) -> None:
    pytest.importorskip("openai")
    assert run(workdir, "try_gateway.py") == [
        "[{'role': 'user', 'content': 'What is 6 x 7?'}]",
        "{'gateway': {'history': 'opening'}, 'max_new_tokens': 64}",
        "[{'role': 'tool', 'content': '42', 'tool_call_id': 'call_0_0'}] 0.0 False",
        "(1.0, True)",
    ]


def test_gateway_config_block_is_a_valid_env_config(workdir: Path) -> None:
    """The doc's YAML block configures AgentGateway-v0 as written (its agent imports, its tasks load)."""
    import yaml

    from agentrl.gateway.config import AgentGatewayConfig

    section = DOC.read_text(encoding="utf-8").split("## Agent gateway", 1)[1]
    block = re.search(r"^```yaml\n(.*?)^```", section, re.DOTALL | re.M)
    assert block is not None
    env = yaml.safe_load(block.group(1))["env"]
    assert env["id"] == "agentrl/AgentGateway-v0"
    (workdir / "tasks.jsonl").write_text('{"task_id": "m1", "question": "What is 6 x 7?", "answer": 42}\n')
    config = AgentGatewayConfig(**{**env["kwargs"], "tasks": str(workdir / "tasks.jsonl")})
    sys.path.insert(0, str(workdir))
    try:
        assert config.agent.program().preflight()[0].startswith("agent my_agent:agent: async def")
    finally:
        sys.path.remove(str(workdir))
        sys.modules.pop("my_agent", None)
