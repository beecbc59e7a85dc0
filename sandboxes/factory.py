"""make_sandbox: the one place a config's backend name becomes a sandbox instance (``auto`` resolved here too)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pydantic

from sandboxes.base import Sandbox
from sandboxes.config import AutoSandboxConfig, DockerSandboxConfig, ProcessSandboxConfig, SandboxConfig
from sandboxes.docker_backend import DockerSandbox, docker_available
from sandboxes.errors import SandboxConfigError
from sandboxes.process_backend import ProcessSandbox

log = logging.getLogger(__name__)
AnySandboxConfig = DockerSandboxConfig | ProcessSandboxConfig | AutoSandboxConfig
_ADAPTER: pydantic.TypeAdapter[AnySandboxConfig] = pydantic.TypeAdapter(SandboxConfig)


def parse_sandbox_config(data: Mapping[str, Any]) -> AnySandboxConfig:
    """A validated config from a mapping (e.g. YAML env kwargs); `kind` defaults to "docker"."""
    try:
        return _ADAPTER.validate_python(data if "backend" in data else {"kind": "docker", **data})
    except pydantic.ValidationError as exc:
        raise SandboxConfigError(
            f"invalid sandbox config {dict(data)!r}: {exc}; kinds are 'docker' (DockerSandboxConfig), "
            "'process' (ProcessSandboxConfig) and 'auto' (AutoSandboxConfig)"
        ) from exc


def resolve_backend(config: AnySandboxConfig) -> DockerSandboxConfig | ProcessSandboxConfig:
    """The concrete backend config: ``auto`` becomes Docker when usable, else the process backend (warned)."""
    if not isinstance(config, AutoSandboxConfig):
        return config
    if docker_available(config.docker):
        return config.docker
    log.warning(
        "sandbox backend auto: no Docker engine with the image %r here, using the process backend "
        "(weaker isolation; see docs/sandbox-security.md)",
        config.docker.image,
    )
    return config.process


def make_sandbox(config: AnySandboxConfig | Mapping[str, Any]) -> Sandbox:
    """Start a sandbox for `config` (Docker, process, or auto; a mapping is validated first)."""
    if isinstance(config, Mapping):
        config = parse_sandbox_config(config)
    if isinstance(config, AutoSandboxConfig):
        config = resolve_backend(config)
    if isinstance(config, DockerSandboxConfig):
        return DockerSandbox(config)
    if isinstance(config, ProcessSandboxConfig):
        return ProcessSandbox(config)
    raise SandboxConfigError(
        f"make_sandbox needs a DockerSandboxConfig, ProcessSandboxConfig, AutoSandboxConfig or a mapping, got "
        f"{type(config).__name__}"
    )
