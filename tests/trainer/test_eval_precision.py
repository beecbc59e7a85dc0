"""eval.precision: held-out episodes decode in a float32 twin of a bf16 rollout engine, over the trainer's own
weights, so a greedy evaluation does not depend on which episodes share a batch; refused where no twin can exist."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest
import torch

from agentrl.engines.base import SamplingParams
from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.engines.embedded.engine import EmbeddedEngine
from agentrl.errors import ConfigError, EngineConfigError
from agentrl.job.loader import load_config
from agentrl.models.loading import set_activation_checkpointing
from agentrl.trainer.eval_engine import evaluation_engine, needs_float32_twin

ROOT = Path(__file__).resolve().parents[2]
GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0, ignore_eos=True)
PROMPTS = [[5, 17, 42, 9], [3, 3, 8], [100, 7, 61, 2, 2, 19], [11]]


def _cfg(model_dir: Path, *overrides: str):
    base = [f"model.path={model_dir}", "eval.splits=[train]", "eval.precision=float32"]
    return load_config(ROOT / "configs" / "tiny_debug.yaml", [*base, *overrides])


def test_float32_evaluation_is_refused_where_no_twin_can_be_built(tiny_model_dir: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _cfg(tiny_model_dir, "engine.kind=sglang", "engine.max_batch_size=null", "engine.urls=[http://127.0.0.1:30000]")
    message = str(info.value)
    assert "eval.precision" in message and "engine sglang" in message and "eval.precision: rollout" in message
    server = _cfg(
        tiny_model_dir,
        "eval.precision=rollout",
        "engine.kind=sglang",
        "engine.max_batch_size=null",
        "engine.urls=[http://127.0.0.1:30000]",
    )
    with pytest.raises(EngineConfigError, match="eval.precision: rollout"):  # a caller that skipped the check
        server.engine.build_float32_twin(server.model, torch.nn.Linear(2, 2))
    problems = _cfg(tiny_model_dir).cross_field_problems(world_size=2)
    assert [p.key for p in problems] == ["eval.precision"] and "torchrun" in problems[0].fix


def test_a_float32_rollout_engine_is_its_own_evaluator(tiny_model_dir: Path, tiny_lm: torch.nn.Module) -> None:
    cfg = _cfg(tiny_model_dir)  # tiny_debug serves float32
    assert not needs_float32_twin(cfg)
    assert needs_float32_twin(_cfg(tiny_model_dir, "model.dtype=bfloat16"))
    assert not needs_float32_twin(_cfg(tiny_model_dir, "model.dtype=bfloat16", "eval.precision=rollout"))

    async def run() -> None:
        sentinel = object()
        async with evaluation_engine(cfg, sentinel, tiny_lm) as engine:
            assert engine is sentinel

    asyncio.run(run())


async def _greedy(engine: object, prompts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
    results = await asyncio.gather(*(engine.generate(p, GREEDY) for p in prompts))  # type: ignore[attr-defined]
    return [(r.output_ids, r.logprobs) for r in results]


def _max_gap(a: list[tuple[list[int], list[float]]], b: list[tuple[list[int], list[float]]]) -> float:
    assert [ids for ids, _ in a] == [ids for ids, _ in b]
    return max(abs(x - y) for (_, la), (_, lb) in zip(a, b) for x, y in zip(la, lb))


def test_the_twin_decodes_the_trainers_float32_weights(tiny_model_dir: Path, tiny_lm: torch.nn.Module) -> None:
    """The twin decodes the trainer's current weights (not the model directory's) in float32 like an engine built over
    a copy of them, leaves the trainer's parameters as they were, the bf16 rollout engine serving, and is closed on
    exit."""
    cfg = _cfg(tiny_model_dir, "model.dtype=bfloat16")
    with torch.no_grad():  # the trainer has moved away from the weights on disk
        for param in tiny_lm.parameters():
            param.add_(0.02 * torch.randn_like(param))
    tiny_lm.train()  # as the trainer holds it, activation checkpointing on
    set_activation_checkpointing(tiny_lm, True)
    before = {name: (p.data_ptr(), p.detach().clone()) for name, p in tiny_lm.named_parameters()}
    settings = EmbeddedEngineConfig(max_seq_len=512, max_batch_size=16)
    trainer_fp32 = EmbeddedEngine(copy.deepcopy(tiny_lm), None, settings)
    disk_fp32 = EmbeddedEngine.from_pretrained(tiny_model_dir, config=settings)
    rollout = cfg.engine.build(cfg.model)
    assert rollout.runner.dtype == torch.bfloat16

    async def run() -> None:
        expected = await _greedy(trainer_fp32, PROMPTS)
        async with evaluation_engine(cfg, rollout, tiny_lm, threads=1) as twin:
            assert twin is not rollout and twin.runner.dtype == torch.float32
            assert twin.runner.lean is not None, twin.runner.lean_reason  # the trainer's hooks did not come along
            # it views the trainer's weights (q/k/v and gate/up fused into buffers of its own), copying no others
            twin_layer, layer = twin.runner.model.model.layers[0], tiny_lm.model.layers[0]
            assert twin_layer.mlp.down_proj.weight.data_ptr() == layer.mlp.down_proj.weight.data_ptr()
            assert twin_layer.self_attn.q_proj.weight.data_ptr() != layer.self_attn.q_proj.weight.data_ptr()
            # its prefix cache holds the bf16 engine's bytes: half the tokens in float32
            assert twin.config.prefix_cache_tokens == rollout.config.prefix_cache_tokens // 2
            got = await _greedy(twin, PROMPTS)
        assert twin._closed
        after = {name: (p.data_ptr(), p.detach()) for name, p in tiny_lm.named_parameters()}
        assert all(after[n][0] == ptr and torch.equal(after[n][1], value) for n, (ptr, value) in before.items())
        assert tiny_lm.training and all(p.requires_grad for p in tiny_lm.parameters())  # the trainer's, untouched
        assert _max_gap(got, expected) < 1e-5  # float32 rounding only (the thread count may differ)
        disk = await _greedy(disk_fp32, PROMPTS)
        assert [ids for ids, _ in disk] != [ids for ids, _ in got] or _max_gap(disk, got) > 1e-3
        served = await _greedy(rollout, PROMPTS[:1])  # the rollout engine serves on after releasing its buffers
        assert len(served[0][0]) == GREEDY.max_new_tokens
        await asyncio.gather(trainer_fp32.close(), disk_fp32.close(), rollout.close())

    asyncio.run(run())


def test_the_twins_greedy_tokens_do_not_depend_on_the_batch(tiny_model_dir: Path, tiny_lm: torch.nn.Module) -> None:
    """What eval.precision float32 is for: each prompt decodes to the same tokens alone as beside the others (the
    evaluation's concurrency decides who shares a step, and tool calls' timing decides it too). Here at up to 4 rows
    a step, inside one matmul form: above 8 rows the CPU engine multiplies the usual way round, which rounds
    otherwise, so float32 makes a flipped near-tie rarer there, not impossible (the config's description says so)."""
    cfg = _cfg(tiny_model_dir, "model.dtype=bfloat16")
    rollout = cfg.engine.build(cfg.model)

    async def run() -> None:
        async with evaluation_engine(cfg, rollout, tiny_lm) as twin:
            together = await _greedy(twin, PROMPTS)
            alone = [(await _greedy(twin, [p]))[0] for p in PROMPTS]
        assert _max_gap(together, alone) < 1e-5
        await rollout.close()

    asyncio.run(run())


def test_a_twin_refuses_a_policy_that_is_not_float32(tiny_model_dir: Path, tiny_lm: torch.nn.Module) -> None:
    cfg = _cfg(tiny_model_dir, "model.dtype=bfloat16")
    with pytest.raises(EngineConfigError, match=r"torch.bfloat16.*load the trainer's model in float32"):
        cfg.engine.build_float32_twin(cfg.model, tiny_lm.to(torch.bfloat16))


def test_under_trainer_deterministic_the_twin_samples_with_content_seeds(
    tiny_model_dir: Path, tiny_lm: torch.nn.Module
) -> None:
    """A sampled evaluation does not depend on who shares a step under trainer.deterministic: the twin's requests
    are seeded from their content, as the rollout engine's are. Unseeded, the engine's one random stream is drawn in
    step order, so a prompt sampled beside others gets other tokens than alone."""
    sampled = SamplingParams(max_new_tokens=12, temperature=1.0, ignore_eos=True)

    async def together_and_alone(cfg: object) -> tuple[list[int], list[int]]:
        rollout = cfg.engine.build(cfg.model)  # type: ignore[attr-defined]
        try:
            async with evaluation_engine(cfg, rollout, tiny_lm) as twin:  # type: ignore[arg-type]
                together = await asyncio.gather(*(twin.generate(p, sampled) for p in PROMPTS))
            async with evaluation_engine(cfg, rollout, tiny_lm) as twin:  # type: ignore[arg-type]
                alone = await twin.generate(PROMPTS[1], sampled)
            return together[1].output_ids, alone.output_ids
        finally:
            await rollout.close()

    beside, alone = asyncio.run(
        together_and_alone(_cfg(tiny_model_dir, "model.dtype=bfloat16", "trainer.deterministic=true"))
    )
    assert beside == alone
    beside, alone = asyncio.run(together_and_alone(_cfg(tiny_model_dir, "model.dtype=bfloat16")))
    assert beside != alone
