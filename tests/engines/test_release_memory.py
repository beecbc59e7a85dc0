"""EmbeddedEngine.release_memory: the KV buffers and the prefix cache are freed once no request runs, and the
engine serves exactly as before afterwards (same tokens and logprobs for the same seeds)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine_harness import build_embedded

from agentrl.engines.base import GenerateResult, SamplingParams

PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21], [30, 31, 32, 33]]


async def _batch(engine: object) -> list[GenerateResult]:
    jobs = [
        engine.generate(p, SamplingParams(max_new_tokens=12, temperature=1.0, ignore_eos=True, seed=7 + i))  # type: ignore[attr-defined]
        for i, p in enumerate(PROMPTS)
    ]
    return list(await asyncio.gather(*jobs))


def test_release_frees_the_caches_and_serving_continues_unchanged(tiny_model_dir: Path) -> None:
    engine = build_embedded(tiny_model_dir)

    async def scenario() -> tuple[list[GenerateResult], list[GenerateResult], list[GenerateResult]]:
        first = await _batch(engine)
        cache = engine.runner.cache
        assert any(k is not None for k in cache.keys) and engine.scheduler.prefix_cache.num_tokens > 0
        await engine.release_memory()
        assert all(k is None for k in cache.keys + cache.values) and cache.rows_cap == cache.cols_cap == 0
        assert engine.scheduler.prefix_cache.num_tokens == 0
        again = await _batch(engine)  # on freshly allocated buffers
        assert engine.scheduler.prefix_cache.num_tokens > 0  # finished requests are kept again
        engine.scheduler.prefix_cache.clear()  # the replay below must not reuse the kept keys/values
        return first, again, await _batch(engine)

    try:
        first, again, third = asyncio.run(scenario())
    finally:
        asyncio.run(engine.close())
    for a, b, c in zip(first, again, third):
        assert a.output_ids == b.output_ids == c.output_ids  # seeded: the same tokens after the release
        assert max(abs(x - y) for x, y in zip(a.logprobs, c.logprobs)) < 1e-5


def test_release_lets_a_running_request_finish_and_a_closed_engine_answers_at_once(tiny_model_dir: Path) -> None:
    engine = build_embedded(tiny_model_dir)
    sampling = SamplingParams(max_new_tokens=48, temperature=1.0, ignore_eos=True, seed=3)

    async def scenario() -> GenerateResult:
        running = asyncio.ensure_future(engine.generate(PROMPTS[0], sampling))
        while engine.scheduler.load()[0] == 0:  # until the request holds a row of the KV cache
            await asyncio.sleep(0.005)
        await engine.release_memory()
        assert engine.scheduler.load() == (0, 0) and all(k is None for k in engine.runner.cache.keys)
        return await running

    try:
        result = asyncio.run(scenario())
    finally:
        asyncio.run(engine.close())
    assert result.finish_reason == "length" and len(result.output_ids) == 48  # not aborted, not cut short
    asyncio.run(asyncio.wait_for(engine.release_memory(), timeout=5))  # closed: nothing held, no loop to wait on
