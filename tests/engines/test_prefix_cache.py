"""The prefix cache: a follow-up prompt that extends a finished request prefills only its new tokens.

Multi-turn continuations reuse the previous turn's keys/values (``cached_tokens``) and still give the
logprobs of a full forward over the whole history; a weight update or /flush_cache drops the cache;
the cache keeps to its token budget and only serves exact strict prefixes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import torch
from engine_harness import ServedEngine, build_embedded, reference_logprobs, run_async

from agentrl.engines.base import GenerateResult, SamplingParams
from agentrl.engines.prefix_cache import PrefixCache

TOL = 1e-4
OBSERVATION = [40, 41, 42, 43, 44]  # a tool result / user message appended after the reply


@pytest.fixture(scope="module")
def reference_model(tiny_model_dir: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def _three_turns(engine: Any, sampling: SamplingParams) -> list[tuple[list[int], GenerateResult]]:
    async def body() -> list[tuple[list[int], GenerateResult]]:
        history = [5, 6, 7, 8, 9, 10, 11, 12, 13]
        turns = []
        for _ in range(3):
            result = await engine.generate(history, sampling)
            turns.append((history, result))
            history = history + result.output_ids + OBSERVATION
        return turns

    return run_async(engine, body)


def test_each_turn_reuses_the_previous_turns_keys_and_values(tiny_model_dir: Path, reference_model: torch.nn.Module) -> None:
    engine = build_embedded(tiny_model_dir)
    try:
        turns = _three_turns(engine, SamplingParams(max_new_tokens=12, temperature=0.7, ignore_eos=True))
    finally:
        asyncio.run(engine.close())
    assert turns[0][1].cached_tokens == 0
    for (prev_prompt, prev), (prompt, result) in zip(turns, turns[1:]):
        # everything of the previous turn but its last sampled token (never fed to the model)
        assert result.cached_tokens == len(prev_prompt) + len(prev.output_ids) - 1
        assert result.prompt_tokens == len(prompt)
    for prompt, result in turns:  # logprobs are still those of one forward over the whole history
        ref = reference_logprobs(reference_model, prompt, result.output_ids, 0.7)
        assert (torch.tensor(result.logprobs) - ref).abs().max().item() <= TOL
    assert engine.scheduler.prefix_cache.hits == 2


def test_greedy_turns_are_the_same_with_and_without_the_cache(tiny_model_dir: Path) -> None:
    greedy = SamplingParams(max_new_tokens=10, temperature=0.0, ignore_eos=True)
    outputs = {}
    for budget in (16384, 0):
        engine = build_embedded(tiny_model_dir, prefix_cache_tokens=budget)
        try:
            turns = _three_turns(engine, greedy)
        finally:
            asyncio.run(engine.close())
        outputs[budget] = [r.output_ids for _, r in turns]
        assert (turns[-1][1].cached_tokens > 0) == (budget > 0)
    assert outputs[16384] == outputs[0]


def test_a_weight_update_drops_the_cache(tiny_model_dir: Path) -> None:
    engine = build_embedded(tiny_model_dir)
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0, ignore_eos=True)
    prompt = list(range(20, 32))

    async def body() -> tuple[GenerateResult, GenerateResult]:
        first = await engine.generate(prompt, sampling)
        await engine.update_weights({k: v.clone() for k, v in engine.runner.model.state_dict().items()}, version=1)
        second = await engine.generate(prompt + first.output_ids + OBSERVATION, sampling)
        return first, second

    try:
        first, second = run_async(engine, body)
    finally:
        asyncio.run(engine.close())
    assert second.cached_tokens == 0 and len(engine.scheduler.prefix_cache) == 1  # only the second turn's own row


def test_flush_cache_over_http_drops_the_cache(tiny_model_dir: Path) -> None:
    inner = build_embedded(tiny_model_dir)
    sampling = {"max_new_tokens": 4, "temperature": 1.0, "ignore_eos": True}
    prompt = list(range(50, 62))

    async def body() -> list[int]:
        cached = []
        async with aiohttp.ClientSession() as session:
            for flush in (False, True):
                async with session.post(served.url + "/generate", json={"input_ids": prompt, "sampling_params": sampling}) as resp:
                    first = await resp.json()
                if flush:
                    async with session.post(served.url + "/flush_cache") as resp:
                        assert resp.status == 200
                follow_up = prompt + first["output_ids"] + OBSERVATION
                async with session.post(served.url + "/generate", json={"input_ids": follow_up, "sampling_params": sampling}) as resp:
                    cached.append((await resp.json())["meta_info"]["cached_tokens"])
        return cached

    with ServedEngine(inner) as served:
        cached = run_async(inner, body)
    asyncio.run(inner.close())
    assert cached == [len(prompt) + 3, 0]


def _kv(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.zeros(1, n, 2), torch.zeros(1, n, 2))]


def test_cache_serves_the_longest_strict_prefix_and_keeps_to_its_budget() -> None:
    cache = PrefixCache(max_tokens=40, min_tokens=4)
    cache.put(list(range(10)), _kv(10))
    cache.put(list(range(15)), _kv(15))
    cache.put([9] * 3, _kv(3))  # below min_tokens: not kept
    assert cache.num_tokens == 25 and len(cache) == 2
    assert cache.take(list(range(15))) is not None  # the 10-token entry: the 15-token one is not strict
    assert cache.take(list(range(15))) is None  # consumed; the other is still not strict
    hit = cache.take(list(range(20)))
    assert hit is not None and len(hit.tokens) == 15
    assert cache.take([1, 2, 3, 4, 5, 6]) is None  # not a prefix
    for start in range(3):  # 3 x 15 tokens > 40: the oldest is evicted
        cache.put(list(range(start, start + 15)), _kv(15))
    assert len(cache) == 2 and cache.num_tokens == 30
    assert cache.take(list(range(0, 16))) is None
    assert cache.take(list(range(2, 18))) is not None
    cache.clear()
    assert len(cache) == 0 and cache.num_tokens == 0


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_groups_identical_prompts_are_prefilled_once(tiny_model_dir: Path, reference_model: torch.nn.Module, temperature: float) -> None:
    """G requests with one prompt (a GRPO group's first turn): one computes the prompt, the others copy
    its keys/values one step later; each still samples on its own, with the logprobs of a full forward."""
    engine = build_embedded(tiny_model_dir, prefix_cache_tokens=0)  # sharing needs no kept entries
    prompt = list(range(100, 124))
    sampling = SamplingParams(max_new_tokens=12, temperature=temperature, ignore_eos=True)

    async def body() -> list[GenerateResult]:
        return list(await asyncio.gather(*(engine.generate(prompt, sampling) for _ in range(4))))

    try:
        results = run_async(engine, body)
    finally:
        asyncio.run(engine.close())
    assert sorted(r.cached_tokens for r in results) == [0, len(prompt) - 1, len(prompt) - 1, len(prompt) - 1]
    assert len({tuple(r.output_ids) for r in results}) > 1  # independent samples, not one answer copied
    for result in results:
        ref = reference_logprobs(reference_model, prompt, result.output_ids, temperature)
        assert (torch.tensor(result.logprobs) - ref).abs().max().item() <= TOL


def test_short_or_different_prompts_are_not_shared(tiny_model_dir: Path) -> None:
    engine = build_embedded(tiny_model_dir, prefix_cache_tokens=0)
    sampling = SamplingParams(max_new_tokens=3, ignore_eos=True)
    prompts = [[1, 2, 3], [1, 2, 3], list(range(30)), list(range(29)) + [99]]

    async def body() -> list[GenerateResult]:
        return list(await asyncio.gather(*(engine.generate(p, sampling) for p in prompts)))

    try:
        results = run_async(engine, body)
    finally:
        asyncio.run(engine.close())
    assert [r.cached_tokens for r in results] == [0, 0, 0, 0]
