"""Pydantic configs of the sandbox backends: every limit is a documented field with a safe default.

`SandboxConfig` is the tagged union (by `kind`: docker, process or auto) that environment configs embed; `kind`
is the tag of every tagged union in the project (engines use it too), and the old name `backend` is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MiB = 1024 * 1024


class _LimitsConfig(BaseModel):
    """Limits shared by every backend."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_bytes: int = Field(default=512 * MiB, ge=32 * MiB, description="Memory limit of the sandbox.")
    max_processes: int = Field(default=64, ge=8, description="Processes/threads the sandbox may hold at once.")
    max_output_bytes: int = Field(
        default=64 * 1024, ge=1024, description="Cap per stream (stdout, stderr) of one run, enforced inside."
    )
    max_read_bytes: int = Field(default=16 * MiB, ge=1024, description="Largest file read_file() returns.")
    kill_background: bool = Field(
        default=True, description="Kill processes a cell left running when the cell ends (daemons, `&`)."
    )
    max_inodes: int = Field(
        default=16384,
        ge=256,
        description="Files, directories and links each writable mount (work dir, /tmp, /dev/shm, extra tmpfs) may "
        "hold (tmpfs nr_inodes, enforced by the kernel): bounds what a reset must erase.",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Environment variables inside the sandbox; nothing of the host's."
    )
    start_timeout_s: float = Field(default=30.0, gt=0, description="Seconds allowed for a sandbox to start.")
    timeout_margin_s: float = Field(
        default=5.0, gt=0, description="Host-side grace over a run's timeout before the session is presumed hung."
    )


class DockerSandboxConfig(_LimitsConfig):
    """A hardened, long-running Docker container with a Python session inside (the default backend)."""

    kind: Literal["docker"] = Field(default="docker", description="The sandbox kind (the union's tag).")
    image: str = Field(
        default="agentrl-python:1",
        description="Image with python3 (build offline: scripts/build_sandbox_image.sh).",
    )
    docker_host: str | None = Field(
        default=None,
        description="Engine URL; None uses $DOCKER_HOST, else unix:///var/run/docker.sock (not the CLI context).",
    )
    python: str = Field(default="python3", description="Python interpreter inside the image.")
    user: str = Field(
        default="65534:65534",
        pattern=r"^[1-9][0-9]*(:[0-9]+)?$",
        description="Numeric uid:gid the container runs as; root (0) is refused.",
    )
    workdir: str = Field(default="/sandbox", description="Writable tmpfs work dir (absent from the image).")
    workdir_size_bytes: int = Field(default=64 * MiB, ge=MiB, description="Size of the work dir tmpfs.")
    tmp_size_bytes: int = Field(default=16 * MiB, ge=MiB, description="Size of the /tmp tmpfs.")
    extra_tmpfs: dict[str, int] = Field(
        default_factory=dict,
        description="More writable tmpfs dirs, absolute path -> size in bytes (task formats that write outside the "
        "work dir, e.g. Harbor's /tests and /logs); owned by the sandbox user, wiped by reset().",
    )
    workdir_exec: bool = Field(default=True, description="Allow executing files written to the work dir.")
    cpus: float = Field(default=1.0, gt=0, le=64, description="CPU quota in cores.")
    network_mode: Literal["none", "bridge"] = Field(default="none", description="'none' cuts all network.")
    volumes: dict[str, str] = Field(
        default_factory=dict, description="Host path -> container path, mounted read-only (none by default)."
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Extra container labels.")


class ProcessSandboxConfig(_LimitsConfig):
    """A local subprocess with rlimits and, where available, a private network namespace (weaker)."""

    kind: Literal["process"] = Field(default="process", description="The sandbox kind (the union's tag).")
    python: str = Field(default="python3", description="Interpreter for the session (resolved on a clean PATH).")
    memory_bytes: int = Field(
        default=1024 * MiB, ge=64 * MiB, description="RLIMIT_AS (address space, larger than resident memory)."
    )
    max_processes: int = Field(default=64, ge=8, description="RLIMIT_NPROC headroom for the sandbox user.")
    cpu_time_s: int = Field(default=600, ge=1, description="RLIMIT_CPU: CPU seconds per session process.")
    max_file_bytes: int = Field(default=64 * MiB, ge=MiB, description="RLIMIT_FSIZE: largest file written.")
    workdir_size_bytes: int = Field(
        default=64 * MiB, ge=MiB, description="Size of the work dir's tmpfs (in the minimal root; not without one)."
    )
    tmp_size_bytes: int = Field(
        default=64 * MiB, ge=MiB, description="Size of the /tmp and /dev/shm tmpfs (in the minimal root; not without)."
    )
    isolate_network: bool = Field(default=True, description="Run in a new network namespace when possible.")
    private_root: bool = Field(
        default=True,
        description="Show the sandbox a minimal root (interpreter and stdlib read-only, its own work dir, /tmp, "
        "/dev/shm) instead of the host's filesystem (sandboxes/jail.py). Off, or where the kernel refuses the "
        "namespaces, the sandbox still runs cells but has an isolation_error, and grading refuses it.",
    )
    run_as_uid: int | None = Field(
        default=None,
        ge=1,
        description="uid/gid to drop to when started as root. None: a private uid per sandbox, leased from "
        "private_uid_first.. (exact RLIMIT_NPROC accounting; sandboxes cannot signal or read each other).",
    )
    private_uid_first: int = Field(default=1_900_000_000, ge=100_000, le=4_000_000_000, description="First leased uid.")
    private_uid_count: int = Field(default=65536, ge=1, le=1_000_000, description="How many uids may be leased.")
    base_dir: str | None = Field(default=None, description="Parent of the per-sandbox temp dirs (None: $TMPDIR).")


class AutoSandboxConfig(BaseModel):
    """Docker when an engine answers and has the image, else the process backend with a warning (weaker isolation).

    Fields of either backend may be given flat (``{"kind": "auto", "memory_bytes": ...}``): each goes to
    every backend that has it. A name neither backend knows is an error.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["auto"] = Field(default="auto", description="The sandbox kind (the union's tag).")
    docker: DockerSandboxConfig = Field(default_factory=DockerSandboxConfig, description="Used when Docker is usable.")
    process: ProcessSandboxConfig = Field(
        default_factory=ProcessSandboxConfig, description="Used otherwise (with a warning)."
    )

    @model_validator(mode="before")
    @classmethod
    def _spread_flat_fields(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        known = {"kind", "docker", "process"}
        flat = {key: value for key, value in data.items() if key not in known}
        backends = {"docker": DockerSandboxConfig, "process": ProcessSandboxConfig}
        unknown = sorted(key for key in flat if not any(key in model.model_fields for model in backends.values()))
        if unknown:
            raise ValueError(
                f"unknown sandbox field(s) {unknown}: neither DockerSandboxConfig nor ProcessSandboxConfig has them"
            )
        out: dict[str, Any] = {key: value for key, value in data.items() if key in known}
        for name, model in backends.items():
            own = data.get(name, {})
            if isinstance(own, BaseModel):
                own = own.model_dump(exclude_unset=True)
            shared = {key: value for key, value in flat.items() if key in model.model_fields}
            out[name] = {**shared, **own} if isinstance(own, Mapping) else own
        return out


SandboxConfig = Annotated[
    DockerSandboxConfig | ProcessSandboxConfig | AutoSandboxConfig,
    Field(discriminator="kind"),
]
