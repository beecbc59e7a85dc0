"""Fingerprints of everything that gives stored token ids and logprobs their meaning.

A buffer written under one tokenizer, chat template, model architecture or logprob semantics is
refused under another: resuming would silently train on garbage. Tokenizer and template hashes
come from ``agentrl.chat.fingerprint`` (the one definition); this module adds the rest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from agentrl.chat import fingerprint as chat_fingerprint
from agentrl.engines.base import InferenceEngine

# Config keys that define the architecture (not dtype, paths or generation defaults).
_ARCH_KEYS = (
    "architectures",
    "model_type",
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "head_dim",
    "tie_word_embeddings",
)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def architecture_fingerprint(model_config: Any) -> str:
    """Hash of the architecture-defining fields of a HF config (object, dict or config.json dir)."""
    if isinstance(model_config, (str, Path)):
        path = Path(model_config) / "config.json"
        if not path.is_file():
            return "unknown"
        model_config = json.loads(path.read_text())
    if not isinstance(model_config, dict):
        model_config = model_config.to_dict()
    return _sha(json.dumps({k: model_config.get(k) for k in _ARCH_KEYS}, sort_keys=True, default=str))


def rollout_fingerprints(tokenizer: Any, engine: InferenceEngine) -> dict[str, str]:
    """Fingerprints of a rollout setup: tokenizer, template, architecture, logprob semantics.

    The architecture is the engine's ``model_identity()``: the served model's config, else its directory,
    else the tokenizer's directory (the run loads both from ``model.path``).
    """
    identity = engine.model_identity()
    config: Any = dict(identity.hf_config) or identity.path or getattr(tokenizer, "name_or_path", "") or ""
    semantics = engine.semantics
    chat = chat_fingerprint(tokenizer)
    return {
        "tokenizer": str(chat["tokenizer_sha256"])[:16],
        "chat_template": str(chat["chat_template_sha256"])[:16],
        "architecture": architecture_fingerprint(config),
        "logprob_semantics": str(getattr(semantics, "value", semantics)),
    }
