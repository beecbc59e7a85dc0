"""``engine.kind: sglang``: the settings of the SGLang HTTP client, and how it builds and checks itself."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from agentrl.config.problems import Problem
from agentrl.engines.config import EngineConfig, import_engine_class
from agentrl.engines.transport import DiskTransport, StateDictTransport, WeightTransport
from agentrl.errors import EngineError

if TYPE_CHECKING:
    from agentrl.config.sections import ModelConfig
    from agentrl.engines.base import InferenceEngine


class SGLangEngineConfig(EngineConfig):
    """SGLang servers (or ``agentrl serve``, or an sglang-router) over SGLang's native HTTP API."""

    kind: Literal["sglang"] = Field("sglang", description="SGLang servers over HTTP.")
    urls: list[str] = Field(
        default_factory=list, description="Server base URLs, e.g. http://10.0.0.5:30000 (at least one)."
    )
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
    request_timeout_s: float = Field(600.0, gt=0, description="HTTP timeout of one /generate call.")
    max_retries: int = Field(3, ge=0, description="Retries with backoff on connection errors and 5xx.")
    weights_dir: str | None = Field(
        None,
        description="Directory both trainer and servers can read, where synced weights are written (default: "
        "<run_dir>/weights).",
    )
    weight_sync: Literal["disk", "tensor"] = Field(
        "disk",
        description="How the trainer's weights reach the servers: disk = safetensors in weights_dir + "
        "/update_weights_from_disk; tensor = /update_weights_from_tensor (torch IPC handles: same host only, "
        "colocated).",
    )
    allow_truncated_sampling: bool = Field(
        False,
        description="Allow top_p < 1 / top_k > 0 requests, whose returned logprobs are not the behaviour logprobs "
        "(fine for eval, biased for training).",
    )

    def problems(self) -> list[Problem]:
        """At least one server URL."""
        if self.urls:
            return []
        return [
            Problem(
                "engine.urls",
                "engine.kind is 'sglang' but no server URL is given",
                "set engine.urls: [http://HOST:30000] or use engine.kind: embedded",
            )
        ]

    def build(self, model: ModelConfig) -> InferenceEngine:
        """An HTTP client for ``urls``; ``model.path`` names what the servers serve (its identity)."""
        return import_engine_class("agentrl.engines.sglang_http:SGLangEngine")(self, model_path=model.path)

    def weight_transport(self, run_dir: Path) -> WeightTransport:
        """Tensors to colocated servers (weight_sync: tensor), else a directory under weights_dir."""
        if self.weight_sync == "tensor":
            return StateDictTransport()
        return DiskTransport(Path(self.weights_dir) if self.weights_dir else Path(run_dir) / "weights")

    async def preflight(self, model: ModelConfig) -> list[str]:
        """Every server (and every worker behind a router) is healthy, its settings and weight version are
        training-grade; what HTTP cannot show is said in the returned lines, not passed silently."""
        engine: Any = self.build(model)  # an SGLangEngine: probe() is its own
        try:
            if not await engine.health():
                raise EngineError(
                    f"SGLang servers {self.urls} are not all healthy (GET /health != 200); start them with "
                    "scripts/launch_sglang.sh and retry"
                )
            return list(await engine.probe())
        finally:
            await engine.close()
