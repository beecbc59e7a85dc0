"""One engine contract, run against the embedded engine in process and over HTTP (agentrl serve)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from engine_harness import run_async, wait_running

from agentrl.engines.base import GenerateResult, InferenceEngine, SamplingParams, new_request_id

PROMPT = [5, 17, 42, 99, 7]


def _check_result(result: GenerateResult, prompt: list[int]) -> None:
    assert len(result.output_ids) == len(result.logprobs)
    assert all(isinstance(lp, float) and lp <= 0.0 for lp in result.logprobs)
    assert result.prompt_tokens == len(prompt)
    spans = result.version_spans
    assert spans[0].start == 0 and spans[-1].end == len(result.output_ids)
    assert result.token_versions() == [spans[0].version] * len(result.output_ids)


async def _greedy(engine: Any, n: int, **kw: Any) -> GenerateResult:
    return await engine.generate(PROMPT, SamplingParams(max_new_tokens=n, temperature=0.0, ignore_eos=True, **kw))


def test_engine_satisfies_protocol(engine: Any) -> None:
    assert isinstance(engine, InferenceEngine)


def test_generate_returns_aligned_tokens_and_logprobs(engine: Any) -> None:
    result = run_async(engine, lambda: engine.generate(PROMPT, SamplingParams(max_new_tokens=12, temperature=1.0)))
    _check_result(result, PROMPT)
    assert result.finish_reason in ("stop", "length")
    assert 1 <= len(result.output_ids) <= 12


def test_max_new_tokens_gives_length(engine: Any) -> None:
    result = run_async(engine, lambda: _greedy(engine, 9))
    assert result.finish_reason == "length" and len(result.output_ids) == 9
    _check_result(result, PROMPT)


def test_batched_generate_more_requests_than_slots(engine: Any) -> None:
    prompts = [PROMPT[: 1 + i % 5] + [i] for i in range(7)]  # 7 requests, 4 slots: queue + join/leave

    async def body() -> list[GenerateResult]:
        return await asyncio.gather(
            *(engine.generate(p, SamplingParams(max_new_tokens=5 + i, ignore_eos=True)) for i, p in enumerate(prompts))
        )

    results = run_async(engine, body)
    for i, (prompt, result) in enumerate(zip(prompts, results)):
        _check_result(result, prompt)
        assert len(result.output_ids) == 5 + i and result.finish_reason == "length"
    assert len({r.request_id for r in results}) == 7


def test_stop_token_ends_generation_and_is_kept(engine: Any) -> None:
    async def body() -> tuple[GenerateResult, GenerateResult]:
        free = await _greedy(engine, 10)
        stop_tok = free.output_ids[3]
        return free, await _greedy(engine, 10, stop_token_ids=(stop_tok,))

    free, stopped = run_async(engine, body)
    first = free.output_ids.index(free.output_ids[3])
    assert stopped.output_ids == free.output_ids[: first + 1]
    assert stopped.finish_reason == "stop" and stopped.matched_stop == free.output_ids[3]
    assert stopped.logprobs == free.logprobs[: first + 1]


def test_stop_string_matches_decoded_text(engine: Any, tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)

    async def body() -> tuple[GenerateResult, GenerateResult, str]:
        free = await _greedy(engine, 12)
        text = tok.decode(free.output_ids[4:6])
        stop = text.strip() or text
        return free, await _greedy(engine, 12, stop=(stop,)), stop

    free, stopped, stop = run_async(engine, body)
    assert stopped.finish_reason == "stop" and stopped.matched_stop == stop
    assert stop in tok.decode(stopped.output_ids)
    assert stop not in tok.decode(stopped.output_ids[:-1])  # tokens kept exactly through the match
    assert stopped.output_ids == free.output_ids[: len(stopped.output_ids)]


def test_abort_running_request_returns_partial_tokens(engine: Any) -> None:
    rid = new_request_id()

    async def body() -> GenerateResult:
        task = asyncio.ensure_future(engine.generate(PROMPT, SamplingParams(max_new_tokens=2000, ignore_eos=True), rid))
        await wait_running(engine, 1)
        await engine.abort([rid])
        return await task

    result = run_async(engine, body)
    assert result.finish_reason == "abort"
    assert 0 < len(result.output_ids) < 2000
    _check_result(result, PROMPT)


def test_abort_queued_request_returns_zero_tokens(engine: Any) -> None:
    long = SamplingParams(max_new_tokens=2000, ignore_eos=True)

    async def body() -> tuple[list[GenerateResult], GenerateResult]:
        running = [asyncio.ensure_future(engine.generate(PROMPT + [i], long)) for i in range(4)]  # fills the 4 slots
        await wait_running(engine, 4)
        queued_rid = new_request_id()
        queued = asyncio.ensure_future(engine.generate(PROMPT, long, queued_rid))
        await asyncio.sleep(0.1)
        await engine.abort([queued_rid])
        queued_result = await queued
        await engine.abort(None)  # abort all
        return list(await asyncio.gather(*running)), queued_result

    running, queued = run_async(engine, body)
    assert queued.finish_reason == "abort" and queued.output_ids == [] and queued.logprobs == []
    for result in running:
        assert result.finish_reason == "abort" and len(result.output_ids) < 2000
        _check_result(result, PROMPT + [0])


def test_weight_update_bumps_version(engine: Any, tiny_model_dir: Path) -> None:
    async def body() -> tuple[int, int, GenerateResult]:
        before = engine.weight_version
        await engine.update_weights(str(tiny_model_dir), version=1)
        return before, engine.weight_version, await _greedy(engine, 4)

    before, after, result = run_async(engine, body)
    assert (before, after) == (0, 1)
    assert [(s.version, s.start, s.end) for s in result.version_spans] == [(1, 0, 4)]


def test_health(engine: Any) -> None:
    assert run_async(engine, engine.health) is True
