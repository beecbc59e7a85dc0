"""Build the configured inference engine: the backend registered for ``engine.kind`` builds itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentrl.config.problems import ProblemsError
from agentrl.config.sections import ModelConfig
from agentrl.engines.base import InferenceEngine
from agentrl.engines.config import EngineConfig
from agentrl.engines.registry import parse_engine_config
from agentrl.errors import ConfigError

if TYPE_CHECKING:  # torch is imported lazily: building an SGLang client needs no torch
    import torch


def resolve_device_dtype(model_cfg: ModelConfig) -> tuple[str, torch.dtype]:
    """ModelConfig's auto device/dtype -> concrete ones (cuda + bfloat16 when available, else cpu + float32)."""
    from agentrl.models.loading import resolve_device, resolve_dtype

    device = resolve_device(model_cfg.device)
    return device, resolve_dtype(model_cfg.dtype, device)


def make_engine(engine_cfg: EngineConfig | Mapping[str, Any], model_cfg: ModelConfig) -> InferenceEngine:
    """The engine a run samples from; a mapping is validated first (an unknown kind is a ConfigError)."""
    if isinstance(engine_cfg, Mapping):
        try:
            engine_cfg = parse_engine_config(engine_cfg)
        except ProblemsError as exc:
            raise ConfigError(str(exc)) from exc
    if not isinstance(engine_cfg, EngineConfig):
        raise ConfigError(
            f"make_engine needs an engine config (EngineConfig subclass) or a mapping, got {type(engine_cfg).__name__}"
        )
    return engine_cfg.build(model_cfg)
