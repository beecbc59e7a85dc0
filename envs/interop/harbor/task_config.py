"""Check a Harbor ``task.toml`` against what Harbor-v0 honours, and resolve its verifier (Harbor 0.26 semantics).

Harbor's ``TaskConfig`` has many fields; ``harbor init`` writes most of them with their defaults.
A field is either honoured (its value changes what agentrl does, as in Harbor), informational
(it cannot change the grade: metadata, timeouts of a whole agent run, build timeouts), or refused:
a value the adapter cannot play (``[[steps]]``, a request for the network, GPUs, MCP servers,
a user to run as, ...) raises ``ConfigError`` naming the field, instead of being ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError

# Keys per table that agentrl reads or that cannot change a grade; any other key is refused as unknown.
_KNOWN: dict[str, set[str]] = {
    "": {"schema_version", "task", "metadata", "source", "verifier", "agent", "environment", "solution", "artifacts"},
    "verifier": {"timeout_sec", "env", "user", "environment_mode", "environment", "collect", "network_mode"}
    | {"allowed_hosts"},
    "agent": {"timeout_sec", "user", "network_mode", "allowed_hosts"},
    "environment": {"build_timeout_sec", "docker_image", "os", "cpus", "memory_mb", "storage_mb", "gpus"}
    | {"gpu_types", "tpu", "mcp_servers", "env", "skills_dir", "healthcheck", "workdir", "allow_internet"}
    | {"network_mode", "allowed_hosts"},
}
_OFFLINE = "agentrl runs every task offline (no network, images built with networking off)"


class HarborFieldError(ConfigError):
    """A task.toml field asks for something Harbor-v0 does not do; the message names the field and why."""


def _refuse(where: Path, field: str, value: Any, why: str) -> HarborFieldError:
    return HarborFieldError(f"{where}: {field} = {value!r} is not supported by Harbor-v0: {why}")


def _check_network(where: Path, table: str, section: dict[str, Any], permitted: tuple[str, ...]) -> None:
    """Refuse an explicit request for network access.

    ``[environment] network_mode = "public"`` is Harbor's default, which ``harbor init`` writes into every task:
    it is taken as permission, not need. A phase's (``[agent]``, ``[verifier]``) mode is unset by default, so a
    "public" there asks for the network during that phase, as ``allow_internet = true`` or an allowlist do.
    """
    mode = section.get("network_mode")
    if section.get("allow_internet") is True:
        raise _refuse(where, f"[{table}] allow_internet", True, f"{_OFFLINE}; remove it (or set it false)")
    if (mode is not None and mode not in permitted) or section.get("allowed_hosts"):
        raise _refuse(
            where,
            f"[{table}] network_mode",
            mode,
            f"{_OFFLINE}; a phase's or an allowlisted network cannot be honoured (use 'no-network')",
        )


def _check_environment(where: Path, table: str, env: dict[str, Any]) -> None:
    _check_network(where, table, env, ("public", "no-network"))
    if env.get("os", "linux") != "linux":
        raise _refuse(where, f"[{table}] os", env["os"], "only Linux containers run in agentrl's Docker sandboxes")
    if env.get("gpus") or env.get("gpu_types") or env.get("tpu"):
        field = next(name for name in ("gpus", "gpu_types", "tpu") if env.get(name))
        raise _refuse(where, f"[{table}] {field}", env[field], "sandboxes get no accelerator")
    for field, why in (
        ("mcp_servers", "the agent is the policy, which gets no MCP servers from a task; use McpTools-v0"),
        ("skills_dir", "skills are an agent-harness feature; the policy gets only bash and submit"),
        ("healthcheck", "services with health checks are not started (docker-compose environments are refused)"),
    ):
        if env.get(field):
            raise _refuse(where, f"[{table}] {field}", env[field], why)


def check_task_config(config: dict[str, Any], where: Path) -> None:
    """Raise HarborFieldError for the first field (or unknown key) whose value Harbor-v0 would not honour."""
    if config.get("steps"):
        raise _refuse(
            where,
            "[[steps]]",
            f"{len(config['steps'])} step(s)",
            "multi-step tasks (a verifier per step) are not played; split the steps into separate tasks",
        )
    for table, known in _KNOWN.items():
        section = config if not table else config.get(table, {})
        unknown = sorted(set(section) - known) if isinstance(section, dict) else []
        if table == "" and "multi_step_reward_strategy" in unknown:
            unknown.remove("multi_step_reward_strategy")  # meaningful with [[steps]] only, refused above
        if unknown:
            label = f"[{table}]" if table else "the top level"
            raise HarborFieldError(
                f"{where}: {label} has key(s) {', '.join(unknown)} that Harbor-v0 does not know (Harbor 0.26's "
                "TaskConfig); remove them, or see docs/interop.md for the fields it honours"
            )
    verifier, agent = config.get("verifier", {}), config.get("agent", {})
    _check_environment(where, "environment", config.get("environment", {}))
    if isinstance(verifier.get("environment"), dict):
        _check_environment(where, "verifier.environment", verifier["environment"])
    for table, section in (("agent", agent), ("verifier", verifier)):
        _check_network(where, table, section, ("no-network",))
        if section.get("user") is not None:
            raise _refuse(
                where, f"[{table}] user", section["user"], "sandboxes run as one unprivileged user (root is refused)"
            )
    if verifier.get("collect"):
        raise _refuse(where, "[[verifier.collect]]", "...", "collect commands run in compose services, not supported")
    mode = verifier.get("environment_mode")
    if mode not in (None, "shared", "separate"):
        raise _refuse(where, "[verifier] environment_mode", mode, "Harbor knows 'shared' and 'separate'")
    if mode == "shared" and verifier.get("environment") is not None:
        raise HarborFieldError(f"{where}: [verifier] environment_mode = 'shared' conflicts with [verifier.environment]")


def verifier_mode(config: dict[str, Any]) -> str:
    """Harbor's resolution: the explicit mode, else 'separate' when [verifier.environment] is set, else 'shared'."""
    verifier = config.get("verifier", {})
    if verifier.get("environment_mode") is not None:
        return str(verifier["environment_mode"])
    return "separate" if verifier.get("environment") is not None else "shared"


def artifact_paths(config: dict[str, Any], where: Path) -> tuple[str, ...]:
    """The task's ``artifacts`` sources (absolute container paths) that a separate verifier receives."""
    sources = []
    for entry in config.get("artifacts", []):
        source = entry if isinstance(entry, str) else entry.get("source") if isinstance(entry, dict) else None
        if not isinstance(source, str) or not source.startswith("/"):
            raise HarborFieldError(f"{where}: artifacts entry {entry!r} needs an absolute 'source' path")
        if isinstance(entry, dict) and (entry.get("service") or entry.get("exclude")):
            field = "service" if entry.get("service") else "exclude"
            raise _refuse(where, f"artifacts[{source!r}].{field}", entry[field], "only plain source paths are copied")
        sources.append(source.rstrip("/") or "/")
    return tuple(sources)
