"""``kind: auto``: Docker when an engine answers and has the image, else the process backend with a warning;
flat fields reach every backend that has them, and a name neither knows is an error."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from sandboxes import (
    AutoSandboxConfig,
    DockerSandboxConfig,
    ProcessSandbox,
    ProcessSandboxConfig,
    SandboxConfigError,
    make_sandbox,
    parse_sandbox_config,
    resolve_backend,
)

UNREACHABLE = "unix:///nonexistent/docker.sock"  # a real engine URL nothing listens on


def test_flat_fields_go_to_the_backends_that_have_them() -> None:
    config = parse_sandbox_config({"kind": "auto", "memory_bytes": 2**30, "image": "mine:1", "cpu_time_s": 7})
    assert isinstance(config, AutoSandboxConfig)
    assert config.docker.memory_bytes == config.process.memory_bytes == 2**30
    assert config.docker.image == "mine:1" and config.process.cpu_time_s == 7
    nested = AutoSandboxConfig(docker=DockerSandboxConfig(image="x:1"), memory_bytes=2**30)
    assert nested.docker.image == "x:1" and nested.docker.memory_bytes == 2**30  # flat and nested fields combine
    with pytest.raises(SandboxConfigError, match=r"unknown sandbox field\(s\) \['memroy_bytes'\]"):
        parse_sandbox_config({"kind": "auto", "memroy_bytes": 1})
    with pytest.raises(SandboxConfigError, match="memory_bytes"):
        parse_sandbox_config({"kind": "auto", "memory_bytes": 5})  # below both backends' minimum


def test_without_a_usable_engine_auto_starts_the_process_backend_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = AutoSandboxConfig(docker_host=UNREACHABLE)
    with caplog.at_level(logging.WARNING, logger="sandboxes.factory"):
        assert isinstance(resolve_backend(config), ProcessSandboxConfig)
        with make_sandbox(config) as sandbox:
            assert isinstance(sandbox, ProcessSandbox)
            assert sandbox.run_python("print(6 * 7)", timeout_s=10).stdout.strip() == "42"
    assert "using the process backend (weaker isolation" in caplog.text


@pytest.mark.docker
def test_with_docker_usable_auto_picks_docker(config_for: Callable[..., Any]) -> None:
    config_for("docker")  # skips without an engine and the image (fails under CI=true)
    assert isinstance(resolve_backend(AutoSandboxConfig()), DockerSandboxConfig)
    assert resolve_backend(ProcessSandboxConfig()) == ProcessSandboxConfig()  # concrete configs pass through
