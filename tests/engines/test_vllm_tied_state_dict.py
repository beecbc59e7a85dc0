"""vLLM cannot reload a tied LM head in place; the refusal also holds when the weights arrive as a state dict
(written to a directory with no config.json), before anything is written or any server is called."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from agentrl.config.sections import ModelConfig
from agentrl.engines.vllm.config import VLLMEngineConfig
from agentrl.errors import EngineConfigError
from agentrl.models.tiny import make_tiny_model


def test_a_tied_state_dict_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    tied = make_tiny_model(tmp_path / "tied", hidden_size=128, head_dim=64)  # tied, as SmolLM2 and Qwen3-0.6B
    state = AutoModelForCausalLM.from_pretrained(tied).state_dict()
    weights = tmp_path / "weights"
    cfg = VLLMEngineConfig(urls=["http://127.0.0.1:9"], weights_dir=str(weights))  # nothing listens there
    engine = cfg.build(ModelConfig(path=str(tied)))
    with pytest.raises(EngineConfigError, match="tie_word_embeddings=true"):
        asyncio.run(engine.update_weights(state, version=1))
    assert not weights.exists()

    unknown_model = cfg.build(ModelConfig(path=str(tmp_path / "elsewhere")))  # the run's model dir not readable
    with pytest.raises(EngineConfigError, match="no LM head of its own"):  # lm_head shares the embedding
        asyncio.run(unknown_model.update_weights(state, version=1))
    without_head = {k: v for k, v in state.items() if not k.endswith("lm_head.weight")}
    with pytest.raises(EngineConfigError, match="no LM head of its own"):
        asyncio.run(unknown_model.update_weights(without_head, version=1))
    assert not weights.exists()
