"""Inference engines behind one async token-in/token-out protocol (``base.InferenceEngine``).

``EmbeddedEngine`` (in-process torch, continuous batching), ``SGLangEngine`` (SGLang servers over HTTP)
and ``make_engine`` are imported lazily, so importing this package does not import torch.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "EmbeddedEngine": "agentrl.engines.embedded.engine",
    "SGLangEngine": "agentrl.engines.sglang_http",
    "make_engine": "agentrl.engines.factory",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agentrl.engines' has no attribute {name!r}")
