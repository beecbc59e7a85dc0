"""Sandboxes for untrusted code: hardened Docker containers and a process fallback. Knows nothing of RL."""

from sandboxes.base import Sandbox
from sandboxes.config import AutoSandboxConfig, DockerSandboxConfig, ProcessSandboxConfig, SandboxConfig
from sandboxes.docker_backend import DockerSandbox, docker_available
from sandboxes.errors import (
    ImageNotFoundError,
    SandboxClosedError,
    SandboxConfigError,
    SandboxCrashedError,
    SandboxError,
    SandboxFileError,
    SandboxInputError,
    SandboxIsolationError,
    SandboxPoolError,
    SandboxStartError,
    SandboxUnavailableError,
)
from sandboxes.factory import make_sandbox, parse_sandbox_config, resolve_backend
from sandboxes.pool import SandboxPool
from sandboxes.process_backend import ProcessSandbox
from sandboxes.reaper import reap_stale_containers
from sandboxes.result import ExecResult
from sandboxes.service import SandboxService, ServiceReply
from sandboxes.shared import close_shared_pools, shared_pool

__all__ = [
    "AutoSandboxConfig",
    "DockerSandbox",
    "DockerSandboxConfig",
    "ExecResult",
    "ImageNotFoundError",
    "ProcessSandbox",
    "ProcessSandboxConfig",
    "Sandbox",
    "SandboxClosedError",
    "SandboxConfig",
    "SandboxConfigError",
    "SandboxCrashedError",
    "SandboxError",
    "SandboxFileError",
    "SandboxInputError",
    "SandboxIsolationError",
    "SandboxPool",
    "SandboxPoolError",
    "SandboxService",
    "SandboxStartError",
    "SandboxUnavailableError",
    "ServiceReply",
    "close_shared_pools",
    "docker_available",
    "make_sandbox",
    "parse_sandbox_config",
    "reap_stale_containers",
    "resolve_backend",
    "shared_pool",
]
