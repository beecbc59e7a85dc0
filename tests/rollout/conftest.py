"""Fixtures of the rollout tests: the tiny model's tokenizer, and a way to build fresh embedded engines."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentrl.engines.embedded.config import EmbeddedEngineConfig

# Test modules import the test envs as ``rollout_test_envs`` (also how the subprocess jobs name them,
# via PYTHONPATH); pytest's importlib mode does not put this folder on sys.path by itself.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir: Path) -> Any:
    """The tiny model's tokenizer (ChatML template)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture()
def make_engine(tiny_model_dir: Path) -> Callable[[], Any]:
    """Build a fresh embedded engine on the tiny model (call inside the test's event loop; close it there)."""
    from agentrl.engines.embedded.engine import EmbeddedEngine

    def build() -> Any:
        return EmbeddedEngine.from_pretrained(tiny_model_dir, config=EmbeddedEngineConfig(max_seq_len=1024, seed=0))

    return build
