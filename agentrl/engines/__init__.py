"""Inference engines behind one async token-in/token-out protocol (``base.InferenceEngine``).

A backend is a config model (``config.EngineConfig`` subclass) registered under its ``engine.kind``
(``registry.register_engine``): ``embedded`` (``EmbeddedEngine``: in-process torch, continuous
batching), ``sglang`` (``SGLangEngine``: SGLang servers over HTTP)
and ``vllm`` (``VLLMEngine``: vLLM servers over HTTP). Names are imported lazily,
so importing this package does not import torch.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "EmbeddedEngine": "agentrl.engines.embedded.engine",
    "EmbeddedEngineConfig": "agentrl.engines.embedded.config",
    "EngineConfig": "agentrl.engines.config",
    "SGLangEngine": "agentrl.engines.sglang.http",
    "SGLangEngineConfig": "agentrl.engines.sglang.config",
    "engine_kinds": "agentrl.engines.registry",
    "make_engine": "agentrl.engines.factory",
    "register_engine": "agentrl.engines.registry",
    "VLLMEngine": "agentrl.engines.vllm.http",
    "VLLMEngineConfig": "agentrl.engines.vllm.config",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentrl.engines' has no attribute {name!r}")
