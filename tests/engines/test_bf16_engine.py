"""The embedded engine serving bf16 weights (model.dtype: bfloat16) beside a float32 trainer.

Its logprobs are those of the bf16 model, so they differ from the trainer's float32 ones by the rounding the
trainer's decoupled objective absorbs (the mismatch GPU runs live with); a weight sync casts the trainer's
float32 master weights into the engine's bf16 parameters in place.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch
from engine_harness import reference_logprobs

from agentrl.engines.base import SamplingParams
from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.engines.embedded.engine import EmbeddedEngine

# measured on the tiny model: bf16 engine vs float32 forward, max 0.0025 (mean 0.0009) over 60 tokens; a
# float32 engine is within 1e-4 (test_logprobs.py)
BF16_LOGPROB_TOL = 0.03


def _bf16_engine(model_dir: Path) -> EmbeddedEngine:
    cfg = EmbeddedEngineConfig(max_batch_size=4, max_seq_len=512, seed=0)
    return EmbeddedEngine.from_pretrained(model_dir, config=cfg, dtype=torch.bfloat16)


def _generate(engine: EmbeddedEngine, prompts: list[list[int]], temperature: float) -> list[object]:
    params = SamplingParams(max_new_tokens=20, temperature=temperature, ignore_eos=True)

    async def body() -> list[object]:
        try:
            return await asyncio.gather(*(engine.generate(p, params) for p in prompts))
        finally:
            await engine.close()

    return asyncio.run(body())


def test_bf16_engine_runs_lean_in_bf16_and_its_logprobs_are_close_to_fp32(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    engine = _bf16_engine(tiny_model_dir)
    assert engine.runner.lean is not None and engine.runner.dtype == torch.bfloat16
    prompts = [[3, 14, 15, 92, 65], [35, 89, 7], [79, 32, 38, 46, 26, 43]]
    results = _generate(engine, prompts, 0.8)
    assert engine.runner.cache.keys[0] is None or engine.runner.cache.keys[0].dtype == torch.bfloat16
    fp32 = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    gaps = []
    for prompt, result in zip(prompts, results):
        got = torch.tensor(result.logprobs)
        assert got.dtype == torch.float32 and len(result.output_ids) == 20
        gaps.append((got - reference_logprobs(fp32, prompt, result.output_ids, 0.8)).abs())
    gap = torch.cat(gaps)
    assert 0.0 < gap.max().item() <= BF16_LOGPROB_TOL  # > 0: the engine really computed in bf16


def test_weight_sync_casts_fp32_master_weights_into_the_bf16_engine(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    trainer = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(0.05 * torch.randn_like(p))
    engine = _bf16_engine(tiny_model_dir)

    async def body() -> object:
        try:
            await engine.update_weights(trainer.state_dict(), version=1)
            greedy = SamplingParams(max_new_tokens=12, temperature=0.0, ignore_eos=True)
            return await engine.generate([5, 6, 7, 8], greedy)
        finally:
            await engine.close()

    result = asyncio.run(body())
    engine_weight = engine.runner.model.get_output_embeddings().weight
    assert engine_weight.dtype == torch.bfloat16
    assert torch.equal(engine_weight, trainer.get_output_embeddings().weight.detach().to(torch.bfloat16))
    ref = reference_logprobs(trainer.eval(), [5, 6, 7, 8], result.output_ids, 1.0)
    assert (torch.tensor(result.logprobs) - ref).abs().max().item() <= BF16_LOGPROB_TOL
    assert result.token_versions() == [1] * 12
