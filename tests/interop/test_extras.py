"""Each adapter without its optional dependency fails with an error that names the install command."""

from __future__ import annotations

import sys

import pytest

from agentrl.errors import AgentRLError, ConfigError
from agentrl.tools.mcp import McpError, McpToolSource
from envs.interop.openenv_wire import OpenEnvError, OpenEnvSession
from envs.interop.verifiers_env import VerifiersEnv


def test_missing_extras_name_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("mcp", "websockets", "websockets.sync", "websockets.sync.client", "verifiers", "verifiers.v1"):
        monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    with pytest.raises(McpError, match=r"pip install 'agentrl\[mcp\]'"):
        McpToolSource({"server": {"transport": "stdio", "command": ["true"]}}).start()
    with pytest.raises(OpenEnvError, match=r"pip install 'agentrl\[openenv\]'"):
        OpenEnvSession("http://127.0.0.1:9")
    with pytest.raises(ConfigError, match=r"pip install 'agentrl\[verifiers\]'"):
        VerifiersEnv(taskset="vf_tasks:ReverseTaskset")
    assert issubclass(McpError, AgentRLError) and issubclass(OpenEnvError, AgentRLError)


def test_registry_lists_the_adapters_without_importing_their_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrl.env.registry import list_envs

    for module in ("mcp", "websockets", "verifiers"):
        monkeypatch.setitem(sys.modules, module, None)
    ids = {info.id for info in list_envs()}
    assert {"agentrl/McpTools-v0", "agentrl/OpenEnv-v0", "agentrl/Harbor-v0", "agentrl/Verifiers-v0"} <= ids
