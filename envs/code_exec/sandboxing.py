"""Choosing and opening the code-exec sandbox, and showing cell output to the model.

``kind: auto`` uses Docker when an engine answers and the image exists, else the process
backend with a warning (weaker isolation: see docs/sandbox-security.md).
"""

from __future__ import annotations

import logging
from typing import Any

from agentrl.errors import ConfigError

log = logging.getLogger(__name__)
_KINDS = ("docker", "process", "auto")


def docker_ready(settings: dict[str, Any]) -> bool:
    """True when a Docker engine answers and has the sandbox image (``auto`` then picks Docker)."""
    from sandboxes.config import DockerSandboxConfig

    try:
        import docker

        config = sandbox_config(settings, "docker")
        client = (
            docker.DockerClient(base_url=config.docker_host, timeout=5)
            if config.docker_host
            else docker.from_env(timeout=5)
        )
        client.ping()
        client.images.get(config.image or DockerSandboxConfig().image)
        return True
    except Exception as exc:  # noqa: BLE001 - any failure here just means "no usable Docker"
        log.debug("docker not usable: %s", exc)
        return False


def requested_kind(settings: dict[str, Any]) -> str:
    """The kind the settings ask for (``kind``, or the sandboxes' own ``backend`` key): docker, process or auto."""
    kind = settings.get("kind", settings.get("backend", "auto"))
    if kind not in _KINDS:
        raise ConfigError(f"sandbox kind {kind!r} is not one of {list(_KINDS)}; set env.kwargs.sandbox.kind")
    return kind


def sandbox_config(settings: dict[str, Any], kind: str) -> Any:
    """The backend config for ``kind`` from the settings; with kind auto, fields of the other backend are ignored."""
    from sandboxes.config import DockerSandboxConfig, ProcessSandboxConfig

    config_cls = DockerSandboxConfig if kind == "docker" else ProcessSandboxConfig
    fields = {key: value for key, value in settings.items() if key not in ("kind", "backend")}
    if requested_kind(settings) == "auto":
        fields = {key: value for key, value in fields.items() if key in config_cls.model_fields}
    try:
        return config_cls(**fields)
    except ValueError as exc:
        raise ConfigError(f"invalid sandbox settings {settings!r} for the {kind} backend: {exc}") from exc


def resolve_kind(settings: dict[str, Any]) -> str:
    """The backend ``settings`` resolve to here: docker or process."""
    kind = requested_kind(settings)
    if kind != "auto":
        return kind
    if docker_ready(settings):
        return "docker"
    log.warning(
        "sandbox kind auto: no Docker engine with the sandbox image here, using the process backend "
        "(weaker isolation; see docs/sandbox-security.md)"
    )
    return "process"


def check_settings(settings: dict[str, Any]) -> None:
    """Validate sandbox settings without starting anything (ConfigError names the bad field)."""
    kind = requested_kind(settings)
    for backend in ("docker", "process") if kind == "auto" else (kind,):
        sandbox_config(settings, backend)


def open_sandbox(settings: dict[str, Any]) -> Any:
    """Start a sandbox from the env's ``sandbox`` settings (kind plus the backend's own config fields)."""
    from sandboxes import make_sandbox

    kind = resolve_kind(settings)
    return make_sandbox(sandbox_config(settings, kind))


def _clip(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    return f"{text[:head]}\n[... {len(text) - max_chars} characters cut ...]\n{text[-tail:]}"


def shorten(result: Any, max_chars: int) -> str:
    """Cell output for the model: stdout, then stderr, then status notes, head and tail kept."""
    parts = [result.stdout.rstrip("\n")] if result.stdout.strip() else []
    if result.stderr.strip():
        parts.append(result.stderr.rstrip("\n"))
    if result.timed_out:
        parts.append("[timed out: the cell was stopped]")
    elif result.oom_killed:
        parts.append("[out of memory: the cell was killed]")
    if result.restarted:
        parts.append("[the Python session was restarted: earlier variables are gone]")
    text = "\n".join(parts) or "(no output)"
    return _clip(text, max_chars)
