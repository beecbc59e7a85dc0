"""The shipped session server is one stdlib-only script, and the Docker container is hardened as configured."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

import pytest

from sandboxes import DockerSandbox
from sandboxes.docker_backend import connect
from sandboxes.session import server_source

ConfigFactory = Callable[..., Any]  # the `config_for` fixture


def test_shipped_server_is_standalone_stdlib() -> None:
    tree = ast.parse(server_source())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }
    assert "sandboxes" not in imported
    assert imported <= {
        "__future__",
        "ast",
        "base64",
        "ctypes",
        "json",
        "os",
        "resource",
        "select",
        "shutil",
        "signal",
        "stat",
        "struct",
        "sys",
        "time",
        "traceback",
        "typing",
    }


@pytest.mark.docker
def test_container_is_hardened_by_default(config_for: ConfigFactory) -> None:
    with DockerSandbox(config_for("docker")) as sandbox:  # type: ignore[arg-type]
        attrs = connect(sandbox.config).api.inspect_container(sandbox.container_id)
        host = attrs["HostConfig"]
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
        assert host["PidsLimit"] == sandbox.config.max_processes
        assert host["Memory"] == host["MemorySwap"] == sandbox.config.memory_bytes
        assert host["NanoCpus"] == 1_000_000_000 and not host["Binds"] and not host["Privileged"]
        assert attrs["Config"]["User"] == "65534:65534"
        assert not any(m["Type"] == "bind" for m in attrs["Mounts"])
        assert "docker.sock" not in str(attrs["Mounts"])


@pytest.mark.docker
def test_container_removed_behind_our_back_is_recreated(config_for: ConfigFactory) -> None:
    with DockerSandbox(config_for("docker")) as sandbox:  # type: ignore[arg-type]
        old_id = sandbox.container_id
        connect(sandbox.config).api.remove_container(old_id, force=True)
        lost = sandbox.run_python("print(1)", 5)
        assert lost.restarted and lost.exit_code is None and "restarted" in lost.note
        assert sandbox.run_python("print(1)", 5).stdout == "1\n"
        assert sandbox.container_id != old_id
