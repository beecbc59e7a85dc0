"""The base of engine backends that are HTTP clients of inference servers (``sglang``, ``vllm``): the fields they
share, their one config check, and their weight directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from agentrl.config.problems import Problem
from agentrl.config.sections import ModelConfig
from agentrl.engines.config import EngineConfig
from agentrl.engines.transport import DiskTransport
from agentrl.errors import EngineError


class ServerEngineConfig(EngineConfig):
    """Servers reached over HTTP; a subclass names its kind, its example port and its endpoints."""

    example_port: ClassVar[int] = 30000  # the servers' usual port, for the messages
    server_label: ClassVar[str] = "servers"  # "SGLang servers", for the messages
    start_hint: ClassVar[str] = "start them and retry"  # how to start them, for the messages

    urls: list[str] = Field(
        default_factory=list, description="Server base URLs, e.g. http://10.0.0.5:PORT (at least one)."
    )
    request_timeout_s: float = Field(600.0, gt=0, description="HTTP timeout of one generation request.")
    max_retries: int = Field(3, ge=0, description="Retries with backoff on connection errors and 5xx.")
    weights_dir: str | None = Field(
        None,
        description="Directory both trainer and servers can read, where synced weights are written (default: "
        "<run_dir>/weights); the servers load each version from it by path.",
    )
    allow_truncated_sampling: bool = Field(
        False,
        description="Allow top_p < 1 / top_k > 0 requests, whose returned logprobs are those of the truncated "
        "distribution, not the behaviour logprobs of the full vocabulary (fine for eval, biased for training).",
    )

    def outlives_the_run(self) -> bool:
        """A server keeps whatever weights the last run that used it loaded."""
        return True

    async def served_dtype(self, model: ModelConfig) -> str | None:
        """Unknown by default: a server's dtype is set where it is launched (a backend that reads it overrides)."""
        return None

    def problems(self) -> list[Problem]:
        """At least one server URL."""
        if self.urls:
            return []
        return [
            Problem(
                "engine.urls",
                f"engine.kind is {self.kind!r} but no server URL is given",
                f"set engine.urls: [http://HOST:{self.example_port}] or use engine.kind: embedded",
            )
        ]

    async def preflight(self, model: ModelConfig) -> list[str]:
        """Every server is healthy; its engine's own probe says what HTTP shows of its settings and weight
        version, and the returned lines say what it cannot show (nothing is passed silently)."""
        engine: Any = self.build(model)  # the backend's engine: probe() is its own
        try:
            if not await engine.health():
                raise EngineError(
                    f"{self.server_label} {self.urls} are not all healthy (GET /health != 200); {self.start_hint}"
                )
            return list(await engine.probe())
        finally:
            await engine.close()

    def disk_transport(self, run_dir: Path) -> DiskTransport:
        """Versioned safetensors directories under ``weights_dir`` (default ``<run_dir>/weights``)."""
        return DiskTransport(Path(self.weights_dir) if self.weights_dir else Path(run_dir) / "weights")
