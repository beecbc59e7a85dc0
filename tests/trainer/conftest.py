"""Fixtures of the trainer tests: the tiny model loaded in fp32; this folder's helper modules importable."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

# pytest runs with --import-mode=importlib (no sys.path changes): make trainer_episodes / fsdp_worker importable
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture()
def tiny_lm(tiny_model_dir: Path) -> torch.nn.Module:
    """A fresh fp32 copy of the tiny model (tests mutate it)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
