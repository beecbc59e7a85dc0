"""Fixtures of the trainer tests: the tiny model loaded in fp32."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch



@pytest.fixture()
def tiny_lm(tiny_model_dir: Path) -> torch.nn.Module:
    """A fresh fp32 copy of the tiny model (tests mutate it)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
