"""Build the configured inference engine: ``engine.kind`` picks the backend, one line each."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentrl.config.sections import EngineConfig, ModelConfig
from agentrl.engines.base import InferenceEngine

if TYPE_CHECKING:  # torch is imported lazily: building an SGLang client needs no torch
    import torch


def resolve_device_dtype(model_cfg: ModelConfig) -> tuple[str, torch.dtype]:
    """ModelConfig's auto device/dtype -> concrete ones (cuda + bfloat16 when available, else cpu + float32)."""
    from agentrl.models.loading import resolve_device, resolve_dtype

    device = resolve_device(model_cfg.device)
    return device, resolve_dtype(model_cfg.dtype, device)


def make_engine(engine_cfg: EngineConfig, model_cfg: ModelConfig) -> InferenceEngine:
    """The engine a run samples from: the in-process EmbeddedEngine or SGLang servers over HTTP."""
    if engine_cfg.kind == "sglang":
        from agentrl.engines.sglang_http import SGLangEngine

        return SGLangEngine(engine_cfg)
    from agentrl.engines.embedded.engine import EmbeddedEngine

    device, dtype = resolve_device_dtype(model_cfg)
    return EmbeddedEngine.from_pretrained(model_cfg.path, config=engine_cfg, device=device, dtype=dtype)
