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
from agentrl.engines.embedded.prefix_cache import PrefixCache
from agentrl.engines.embedded.prefix_index import PrefixIndex, block_hashes, shared_length

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


def test_each_turn_reuses_the_previous_turns_keys_and_values(
    tiny_model_dir: Path, reference_model: torch.nn.Module
) -> None:
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
                async with session.post(
                    served.url + "/generate", json={"input_ids": prompt, "sampling_params": sampling}
                ) as resp:
                    first = await resp.json()
                if flush:
                    async with session.post(served.url + "/flush_cache") as resp:
                        assert resp.status == 200
                follow_up = prompt + first["output_ids"] + OBSERVATION
                async with session.post(
                    served.url + "/generate", json={"input_ids": follow_up, "sampling_params": sampling}
                ) as resp:
                    cached.append((await resp.json())["meta_info"]["cached_tokens"])
        return cached

    with ServedEngine(inner) as served:
        cached = run_async(inner, body)
    asyncio.run(inner.close())
    assert cached == [len(prompt) + 3, 0]


def _kv(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.zeros(1, n, 2), torch.zeros(1, n, 2))]


def test_cache_finds_the_longest_shared_head_and_keeps_to_its_budget() -> None:
    cache = PrefixCache(max_tokens=60, min_tokens=8)
    short, long = list(range(12)), list(range(24))
    cache.put(short, _kv(12))
    cache.put(long, _kv(24))
    cache.put([9] * 5, _kv(5))  # below min_tokens: not kept
    assert cache.num_tokens == 36 and len(cache) == 2

    def longest(prompt: list[int]) -> tuple[object, int]:
        return cache.longest(prompt, block_hashes(prompt))

    entry, shared = longest(list(range(30)))  # extends the 24-token entry whole
    assert entry is not None and entry.tokens == long and shared == 24
    assert [k.shape[1] for k, _ in cache.use(entry, 24)] == [24] and len(cache) == 1  # used whole: consumed
    entry, shared = longest(list(range(10)) + [99] * 10)  # shares 10 tokens with the 12-token entry
    assert entry is not None and shared == 10
    assert [k.shape[1] for k, _ in cache.use(entry, 10)] == [10] and len(cache) == 1  # used in part: kept
    assert longest([5] * 20) == (None, 0)  # nothing shared
    for start in range(3):  # 3 x 24 tokens > 60: the least recently used go first
        cache.put(list(range(100 + start, 124 + start)), _kv(24))
    assert len(cache) == 2 and cache.num_tokens == 48
    assert longest(list(range(100, 130)))[0] is None
    assert longest(list(range(102, 130)))[1] == 24
    cache.clear()
    assert len(cache) == 0 and cache.num_tokens == 0 and longest(list(range(30))) == (None, 0)


def test_block_index_finds_the_longest_head_as_owners_come_and_go() -> None:
    class Held:
        def __init__(self, tokens: list[int]) -> None:
            self.prefix_tokens = tokens

    a, b = Held(list(range(40))), Held(list(range(20)) + [7] * 20)
    index: PrefixIndex[Held] = PrefixIndex()
    index.add(a, block_hashes(a.prefix_tokens))
    index.add(b, block_hashes(b.prefix_tokens))
    prompt = list(range(35)) + [1, 2]
    owner, shared = index.longest(prompt, block_hashes(prompt))
    assert owner is a and shared == 35  # block-level hit, then token-level refinement past the last block
    index.remove(b, block_hashes(b.prefix_tokens))  # the blocks b shared with a stay findable through a
    assert index.longest(prompt, block_hashes(prompt)) == (a, 35)
    index.add(b, block_hashes(b.prefix_tokens))
    index.remove(a, block_hashes(a.prefix_tokens))
    assert index.longest(prompt, block_hashes(prompt)) == (b, 20)
    assert shared_length([1, 2, 3, 4], [1, 2, 9, 4], known=4) == 2  # a "known" head that is wrong is re-checked
    assert shared_length([1, 2, 3], [1, 2, 3, 4]) == 3


def _concurrently(
    model_dir: Path, prompts: list[list[int]], sampling: SamplingParams, **config: Any
) -> list[GenerateResult]:
    """Send every prompt at once to a fresh engine (no kept entries: sharing needs none); close it."""
    engine = build_embedded(model_dir, **{"prefix_cache_tokens": 0, **config})

    async def body() -> list[GenerateResult]:
        return list(await asyncio.gather(*(engine.generate(p, sampling) for p in prompts)))

    try:
        return run_async(engine, body)
    finally:
        asyncio.run(engine.close())


def test_prompts_sharing_a_system_prompt_prefill_it_once(
    tiny_model_dir: Path, reference_model: torch.nn.Module
) -> None:
    """Different prompts behind one long common head (a tool-use system prompt): the first computes the
    head, the others copy it and prefill only their own tail; logprobs stay those of a full forward."""
    head = list(range(200, 260))
    prompts = [head + [300 + i, 301 + i, 302 + i] for i in range(3)]
    results = _concurrently(tiny_model_dir, prompts, SamplingParams(max_new_tokens=8, temperature=0.8, ignore_eos=True))
    assert sorted(r.cached_tokens for r in results) == [0, len(head), len(head)]
    for prompt, result in zip(prompts, results):
        ref = reference_logprobs(reference_model, prompt, result.output_ids, 0.8)
        assert (torch.tensor(result.logprobs) - ref).abs().max().item() <= TOL


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_groups_identical_prompts_are_prefilled_once(
    tiny_model_dir: Path, reference_model: torch.nn.Module, temperature: float
) -> None:
    """G requests with one prompt (a GRPO group's first turn): one computes the prompt, the others copy
    its keys/values one step later; each still samples on its own, with the logprobs of a full forward."""
    prompt = list(range(100, 124))
    results = _concurrently(
        tiny_model_dir, [prompt] * 4, SamplingParams(max_new_tokens=12, temperature=temperature, ignore_eos=True)
    )
    assert sorted(r.cached_tokens for r in results) == [0, len(prompt) - 1, len(prompt) - 1, len(prompt) - 1]
    assert len({tuple(r.output_ids) for r in results}) > 1  # independent samples, not one answer copied
    for result in results:
        ref = reference_logprobs(reference_model, prompt, result.output_ids, temperature)
        assert (torch.tensor(result.logprobs) - ref).abs().max().item() <= TOL


def test_short_or_different_prompts_are_not_shared(tiny_model_dir: Path) -> None:
    prompts = [[1, 2, 3], [1, 2, 3], list(range(30)), [99] + list(range(1, 30))]
    results = _concurrently(tiny_model_dir, prompts, SamplingParams(max_new_tokens=3, ignore_eos=True))
    assert [r.cached_tokens for r in results] == [0, 0, 0, 0]


def test_sharing_can_be_switched_off(tiny_model_dir: Path) -> None:
    results = _concurrently(
        tiny_model_dir, [list(range(40))] * 3, SamplingParams(max_new_tokens=3, ignore_eos=True), share_prefixes=False
    )
    assert [r.cached_tokens for r in results] == [0, 0, 0]
