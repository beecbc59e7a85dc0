"""Shared fixtures: a tiny local model built once per session (no model hub)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight Qwen3 model with a ChatML tokenizer, in Hugging Face format."""
    from agentrl.models.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny-model"))
