"""Read Harbor task directories: ``instruction.md``, ``task.toml``, ``environment/``, ``tests/test.sh``.

A task directory (Harbor / Terminal-Bench 2 format) holds the instruction the agent reads, the
environment it works in (``environment/Dockerfile``, or ``[environment] docker_image`` in
``task.toml``), and ``tests/test.sh``, which the verifier runs after the agent and which writes the
reward to ``/logs/verifier/reward.txt`` (or key-value rewards to ``rewards.json``). Only the fields
agentrl uses are read (``task_config`` refuses the ones it would not honour); every problem names the
file and the fix. The verifier runs in the agent's container (``[verifier] environment_mode =
"shared"``) or in its own (``"separate"``, ``harbor init``'s default): an image built from
``tests/Dockerfile`` (tests baked in), ``[verifier.environment] docker_image``, or else the task's
own environment, receiving only the task's ``artifacts`` and ``/logs/artifacts``, as in Harbor.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agentrl.errors import ConfigError
from envs.interop.harbor.task_config import artifact_paths, check_task_config, verifier_mode

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
    storage_mb: int | None = None
    workdir: str | None = None  # [environment] workdir: overrides the image's WORKDIR
    verifier_mode: str = "shared"  # "shared": test.sh runs in the agent's container; "separate": in its own
    verifier_docker_image: str | None = None  # separate: [verifier.environment] docker_image (tests baked in)
    verifier_dockerfile: Path | None = None  # separate: tests/Dockerfile (tests baked in, as Harbor builds it)
    verifier_env: dict[str, str] = {}  # [verifier] env: variables test.sh runs with
    artifacts: tuple[str, ...] = ()  # separate: paths copied from the agent's container (+ /logs/artifacts)

    @property
    def tests_bundled(self) -> bool:
        """Whether the separate verifier's image holds /tests itself (else tests/ is copied in, as in shared mode)."""
        return self.verifier_mode == "separate" and (
            self.verifier_docker_image is not None or self.verifier_dockerfile is not None
        )

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
    check_task_config(config, config_path)
    environment = _table(config, "environment", config_path)
    verifier = _table(config, "verifier", config_path)
    mode = verifier_mode(config)
    verifier_image, verifier_dockerfile = None, None
    if mode == "separate":
        verifier_image = (verifier.get("environment") or {}).get("docker_image")
        tests_dockerfile = path / "tests" / "Dockerfile"
        if verifier_image is None and tests_dockerfile.is_file():
            verifier_dockerfile = tests_dockerfile.resolve()
        elif verifier_image is None and (path / "tests" / "docker-compose.yaml").is_file():
            raise ConfigError(f"Harbor task {path}: tests/docker-compose.yaml verifiers are not supported")
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
        verifier_timeout_s=float(verifier.get("timeout_sec", 600.0)),
        agent_timeout_s=_table(config, "agent", config_path).get("timeout_sec"),
        memory_mb=environment.get("memory_mb"),
        cpus=environment.get("cpus"),
        storage_mb=environment.get("storage_mb"),
        workdir=environment.get("workdir"),
        verifier_mode=mode,
        verifier_docker_image=verifier_image,
        verifier_dockerfile=verifier_dockerfile,
        verifier_env={str(k): str(v) for k, v in verifier.get("env", {}).items()},
        artifacts=artifact_paths(config, config_path),
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
