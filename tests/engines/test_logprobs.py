"""Engine logprobs = log_softmax(logits.float() / T) of a separate full forward pass (<= 1e-4, fp32).

Checked in process and over HTTP, with concurrent requests of different lengths sharing the batch, and
for a sequence aborted mid-way and resumed from ``input_ids + partial`` (through the prefix cache).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch
from engine_harness import reference_logprobs, run_async, wait_running

from agentrl.engines.base import GenerateResult, SamplingParams, new_request_id

TOL = 1e-4


@pytest.fixture(scope="module")
def reference_model(tiny_model_dir: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_full_forward(engine: Any, reference_model: torch.nn.Module, temperature: float) -> None:
    prompts = [[3, 14, 15, 92, 65], [35, 89], [79, 32, 38, 46, 26, 43, 38, 32, 79, 50, 28, 84]]
    sampling = [SamplingParams(max_new_tokens=n, temperature=temperature, ignore_eos=True) for n in (40, 25, 33)]

    async def body() -> list[GenerateResult]:
        return await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, sampling)))

    for prompt, result in zip(prompts, run_async(engine, body)):
        ref = reference_logprobs(reference_model, prompt, result.output_ids, temperature)
        got = torch.tensor(result.logprobs)
        assert got.dtype == torch.float32
        assert (got - ref).abs().max().item() <= TOL


def test_greedy_logprobs_are_untempered(engine: Any, reference_model: torch.nn.Module) -> None:
    prompt = [7, 8, 9]
    result = run_async(
        engine, lambda: engine.generate(prompt, SamplingParams(max_new_tokens=10, temperature=0.0, ignore_eos=True))
    )
    ref = reference_logprobs(reference_model, prompt, result.output_ids, 1.0)
    assert (torch.tensor(result.logprobs) - ref).abs().max().item() <= TOL
    with torch.no_grad():
        logits = reference_model(torch.tensor([prompt + result.output_ids])).logits[0, len(prompt) - 1 : -1]
    assert result.output_ids == logits.argmax(-1).tolist()


def test_resume_after_abort_matches_uninterrupted_forward(engine: Any, reference_model: torch.nn.Module) -> None:
    prompt, temperature, cap = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20], 0.7, 2000
    rid = new_request_id()

    async def body() -> tuple[GenerateResult, GenerateResult]:
        task = asyncio.ensure_future(
            engine.generate(prompt, SamplingParams(max_new_tokens=cap, temperature=temperature, ignore_eos=True), rid)
        )
        await wait_running(engine, 1)
        await engine.abort([rid])
        partial = await task
        resumed = await engine.generate(
            prompt + partial.output_ids, SamplingParams(max_new_tokens=30, temperature=temperature, ignore_eos=True)
        )
        return partial, resumed

    partial, resumed = run_async(engine, body)
    assert partial.finish_reason == "abort" and 0 < len(partial.output_ids) < cap
    assert resumed.prompt_tokens == len(prompt) + len(partial.output_ids)
    # the aborted row's keys/values were kept: only the last partial token is prefilled again
    assert resumed.cached_tokens == resumed.prompt_tokens - 1
    assert len(resumed.output_ids) == min(30, 2048 - resumed.prompt_tokens)
    output = partial.output_ids + resumed.output_ids
    ref = reference_logprobs(reference_model, prompt, output, temperature)
    assert (torch.tensor(partial.logprobs + resumed.logprobs) - ref).abs().max().item() <= TOL


def test_top_k_top_p_do_not_change_logprob_semantics(embedded: Any, reference_model: torch.nn.Module) -> None:
    """SGLang semantics: the logprob is over the full tempered vocabulary, not renormalised over top-k/p."""
    prompt = [21, 22, 23]
    sampling = SamplingParams(max_new_tokens=20, temperature=0.8, top_k=5, top_p=0.9, ignore_eos=True)
    result = run_async(embedded, lambda: embedded.generate(prompt, sampling))
    ref = reference_logprobs(reference_model, prompt, result.output_ids, 0.8)
    assert (torch.tensor(result.logprobs) - ref).abs().max().item() <= TOL
    with torch.no_grad():
        logits = reference_model(torch.tensor([prompt + result.output_ids])).logits[0, len(prompt) - 1 : -1]
    top5 = logits.topk(5, dim=-1).indices
    assert all(tok in top5[i].tolist() for i, tok in enumerate(result.output_ids))


def test_seeded_requests_reproduce_regardless_of_batch(embedded: Any) -> None:
    sampling = SamplingParams(max_new_tokens=15, temperature=1.0, seed=1234, ignore_eos=True)

    async def body() -> tuple[GenerateResult, list[GenerateResult]]:
        alone = await embedded.generate([5, 6, 7], sampling)
        crowd = await asyncio.gather(
            embedded.generate([9, 9], SamplingParams(max_new_tokens=30, ignore_eos=True)),
            embedded.generate([5, 6, 7], sampling),
            embedded.generate([1, 2, 3, 4], SamplingParams(max_new_tokens=8, ignore_eos=True)),
        )
        return alone, list(crowd)

    alone, crowd = run_async(embedded, body)
    assert crowd[1].output_ids == alone.output_ids
