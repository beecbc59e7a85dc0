"""``engine.kind: sglang``: the settings of the SGLang HTTP client, and how it builds and checks itself."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field

from agentrl.engines.config import import_engine_class
from agentrl.engines.server_config import ServerEngineConfig
from agentrl.engines.transport import StateDictTransport, WeightTransport

if TYPE_CHECKING:
    from agentrl.config.sections import ModelConfig
    from agentrl.engines.base import InferenceEngine


class SGLangEngineConfig(ServerEngineConfig):
    """SGLang servers (or ``agentrl serve``, or an sglang-router) over SGLang's native HTTP API."""

    kind: Literal["sglang"] = Field("sglang", description="SGLang servers over HTTP.")
    server_label: ClassVar[str] = "SGLang servers"
    start_hint: ClassVar[str] = "start them with scripts/launch_sglang.sh and retry"
    routing: Literal["sticky", "least_loaded", "round_robin"] = Field(
        "sticky",
        description="How requests are spread over several URLs: sticky sends a prompt to the server that served its "
        "prefix (an episode's earlier turn: prefix-cache locality) unless that server is overloaded (see "
        "sticky_load_slack), else the least-loaded one; least_loaded ignores locality. Behind one sglang-router URL "
        "the router decides (its cache-aware policy).",
    )
    sticky_load_slack: int = Field(
        4,
        ge=0,
        description="Sticky routing: a server with more than this many requests in flight above the least-loaded "
        "server gets no sticky request (sglang-router's balance_abs_threshold).",
    )
    weight_transfer: Literal["disk", "tensor"] = Field(
        "disk",
        description="How the trainer's weights reach the servers: disk = safetensors in weights_dir + "
        "/update_weights_from_disk; tensor = /update_weights_from_tensor (torch IPC handles: same host only, "
        "colocated).",
    )

    def build(self, model: ModelConfig) -> InferenceEngine:
        """An HTTP client for ``urls``; ``model.path`` names what the servers serve (its identity)."""
        return import_engine_class("agentrl.engines.sglang.http:SGLangEngine")(self, model_path=model.path)

    def weight_transport(self, run_dir: Path) -> WeightTransport:
        """Tensors to colocated servers (weight_transfer: tensor), else a directory under weights_dir."""
        if self.weight_transfer == "tensor":
            return StateDictTransport()
        return self.disk_transport(run_dir)

    async def served_dtype(self, model: ModelConfig) -> str | None:
        """The dtype every worker's /server_info reports (None when they differ or one does not say)."""
        engine: Any = self.build(model)
        try:
            await engine.probe()
            dtypes = engine.served_dtypes
        finally:
            await engine.close()
        return next(iter(dtypes)) if len(dtypes) == 1 else None
