"""Bad input and missing infrastructure give clear errors that name the fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pydantic
import pytest

from sandboxes import (
    DockerSandbox,
    DockerSandboxConfig,
    ImageNotFoundError,
    ProcessSandboxConfig,
    SandboxConfig,
    SandboxConfigError,
    SandboxPool,
    SandboxStartError,
    SandboxUnavailableError,
    docker_available,
    make_sandbox,
    parse_sandbox_config,
)

ConfigFactory = Callable[..., Any]  # the `config_for` fixture


def test_no_docker_engine_names_the_fix() -> None:
    config = DockerSandboxConfig(docker_host="unix:///nonexistent/docker.sock", start_timeout_s=2)
    with pytest.raises(SandboxUnavailableError, match="docker_setup.sh.*ProcessSandboxConfig"):
        make_sandbox(config)
    assert not docker_available(config)


def test_docker_host_env_is_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/from-env.sock")
    with pytest.raises(SandboxUnavailableError, match="from-env.sock"):
        make_sandbox(DockerSandboxConfig(start_timeout_s=2))


@pytest.mark.docker
def test_missing_image_names_the_build_command(config_for: ConfigFactory) -> None:
    config = config_for("docker", image="agentrl-no-such-image:0")
    with pytest.raises(ImageNotFoundError, match="build_sandbox_image.sh agentrl-no-such-image:0"):
        DockerSandbox(config)  # type: ignore[arg-type]
    with pytest.raises(ImageNotFoundError):
        SandboxPool(config, size=2)


def test_configs_are_strict_and_discriminated() -> None:
    with pytest.raises(pydantic.ValidationError, match="memory_bytes"):
        DockerSandboxConfig(memory_bytes=1)
    for user in ("0", "0:0", "root", "nobody"):
        with pytest.raises(pydantic.ValidationError, match="user"):
            DockerSandboxConfig(user=user)
    with pytest.raises(pydantic.ValidationError, match="extra"):
        ProcessSandboxConfig(memroy_bytes=1)  # type: ignore[call-arg]
    adapter = pydantic.TypeAdapter(SandboxConfig)
    assert isinstance(adapter.validate_python({"kind": "process"}), ProcessSandboxConfig)
    assert adapter.validate_python({"kind": "docker", "cpus": 0.5}).cpus == 0.5
    with pytest.raises(SandboxConfigError, match="kinds are 'docker'"):
        make_sandbox({"kind": "dokcer"})
    with pytest.raises(SandboxConfigError, match="a mapping, got int"):
        make_sandbox(3)  # type: ignore[arg-type]
    assert isinstance(parse_sandbox_config({"cpus": 2}), DockerSandboxConfig)
    with pytest.raises(SandboxConfigError, match="pool size"):
        SandboxPool(ProcessSandboxConfig(), size=0)


def test_process_backend_bad_interpreter_is_a_clear_start_error() -> None:
    with pytest.raises(SandboxUnavailableError, match="no-such-python.*ProcessSandboxConfig.python"):
        make_sandbox(ProcessSandboxConfig(python="no-such-python"))
    with pytest.raises(SandboxStartError, match="did not start"):
        make_sandbox(ProcessSandboxConfig(python="false"))  # exists, but is no Python
