"""make_sandbox: the one place a config's backend name becomes a sandbox instance."""

from __future__ import annotations

from sandboxes.base import Sandbox
from sandboxes.config import DockerSandboxConfig, ProcessSandboxConfig
from sandboxes.docker_backend import DockerSandbox
from sandboxes.errors import SandboxConfigError
from sandboxes.process_backend import ProcessSandbox


def make_sandbox(config: DockerSandboxConfig | ProcessSandboxConfig) -> Sandbox:
    """Start a sandbox for `config` (Docker or process backend)."""
    if isinstance(config, DockerSandboxConfig):
        return DockerSandbox(config)
    if isinstance(config, ProcessSandboxConfig):
        return ProcessSandbox(config)
    raise SandboxConfigError(
        f"make_sandbox needs a DockerSandboxConfig or ProcessSandboxConfig, got {type(config).__name__}: "
        "validate your dict with pydantic.TypeAdapter(sandboxes.SandboxConfig) first"
    )
