"""Read Harbor task directories: ``instruction.md``, ``task.toml``, ``environment/``, ``tests/test.sh``.

A task directory (Harbor / Terminal-Bench 2 format) holds the instruction the agent reads, the
environment it works in (``environment/Dockerfile``, or ``[environment] docker_image`` in
``task.toml``), and ``tests/test.sh``, which the verifier runs after the agent and which writes the
reward to ``/logs/verifier/reward.txt`` (or key-value rewards to ``rewards.json``). Only the fields
agentrl uses are read; every problem names the file and the fix.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agentrl.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

BUNDLED = Path(__file__).resolve().parents[2] / "data" / "harbor"


class HarborTask(BaseModel):
    """One Harbor task: where it lives, what the agent reads, how its environment is made and verified."""

    model_config = ConfigDict(frozen=True)
    task_id: str
    path: Path
    instruction: str
    docker_image: str | None = None  # [environment] docker_image: a prebuilt image
    dockerfile: Path | None = None  # environment/Dockerfile: built by the env (offline)
    env: dict[str, str] = {}
    verifier_timeout_s: float = 600.0
    agent_timeout_s: float | None = None
    memory_mb: int | None = None
    cpus: float | None = None

    @property
    def tests_dir(self) -> Path:
        """The task's ``tests/`` directory (copied to /tests only when the verifier runs)."""
        return self.path / "tests"


def _table(config: dict[str, Any], name: str, where: Path) -> dict[str, Any]:
    value = config.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: [{name}] must be a table, got {type(value).__name__}")
    return value


def load_task(path: Path) -> HarborTask:
    """Load one task directory; ConfigError names the missing or malformed file."""
    instruction, config_path = path / "instruction.md", path / "task.toml"
    for required in (instruction, path / "tests" / "test.sh"):
        if not required.is_file():
            raise ConfigError(
                f"Harbor task {path} has no {required.relative_to(path)}; a task needs instruction.md "
                "and tests/test.sh (see docs/interop.md)"
            )
    try:
        config = tomllib.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{config_path}: not valid TOML ({exc})") from exc
    environment = _table(config, "environment", config_path)
    dockerfile = path / "environment" / "Dockerfile"
    if environment.get("docker_image") is None and not dockerfile.is_file():
        compose = path / "environment" / "docker-compose.yaml"
        hint = " (docker-compose environments are not supported)" if compose.is_file() else ""
        raise ConfigError(
            f"Harbor task {path} defines no environment{hint}: add environment/Dockerfile or "
            "[environment] docker_image in task.toml"
        )
    return HarborTask(
        task_id=path.name,
        path=path.resolve(),
        instruction=instruction.read_text(encoding="utf-8").strip(),
        docker_image=environment.get("docker_image"),
        dockerfile=dockerfile.resolve() if dockerfile.is_file() else None,
        env={str(k): str(v) for k, v in environment.get("env", {}).items()},
        verifier_timeout_s=float(_table(config, "verifier", config_path).get("timeout_sec", 600.0)),
        agent_timeout_s=_table(config, "agent", config_path).get("timeout_sec"),
        memory_mb=environment.get("memory_mb"),
        cpus=environment.get("cpus"),
    )


def load_harbor_tasks(root: str | Path) -> list[HarborTask]:
    """The tasks under ``root``: a task directory itself, or a folder of task directories (sorted by name)."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"Harbor task path {str(root)!r} is not a directory; point tasks at a task folder")
    if (root / "instruction.md").exists():
        return [load_task(root)]
    tasks = [load_task(child) for child in sorted(root.iterdir()) if (child / "instruction.md").exists()]
    if not tasks:
        raise ConfigError(f"no Harbor tasks (directories with instruction.md) under {root}")
    return tasks
