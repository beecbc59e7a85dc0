"""make_sandbox: the one place a config's backend name becomes a sandbox instance."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic

from sandboxes.base import Sandbox
from sandboxes.config import DockerSandboxConfig, ProcessSandboxConfig, SandboxConfig
from sandboxes.docker_backend import DockerSandbox
from sandboxes.errors import SandboxConfigError
from sandboxes.process_backend import ProcessSandbox

_ADAPTER: pydantic.TypeAdapter[DockerSandboxConfig | ProcessSandboxConfig] = pydantic.TypeAdapter(SandboxConfig)


def parse_sandbox_config(data: Mapping[str, Any]) -> DockerSandboxConfig | ProcessSandboxConfig:
    """A validated config from a mapping (e.g. YAML env kwargs); `backend` defaults to "docker"."""
    try:
        return _ADAPTER.validate_python({"backend": "docker", **data})
    except pydantic.ValidationError as exc:
        raise SandboxConfigError(
            f"invalid sandbox config {dict(data)!r}: {exc}; backends are 'docker' (DockerSandboxConfig) "
            "and 'process' (ProcessSandboxConfig)"
        ) from exc


def make_sandbox(config: DockerSandboxConfig | ProcessSandboxConfig | Mapping[str, Any]) -> Sandbox:
    """Start a sandbox for `config` (Docker or process backend; a mapping is validated first)."""
    if isinstance(config, Mapping):
        config = parse_sandbox_config(config)
    if isinstance(config, DockerSandboxConfig):
        return DockerSandbox(config)
    if isinstance(config, ProcessSandboxConfig):
        return ProcessSandbox(config)
    raise SandboxConfigError(
        f"make_sandbox needs a DockerSandboxConfig, ProcessSandboxConfig or a mapping, got {type(config).__name__}"
    )
