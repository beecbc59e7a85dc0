"""Sticky routing: an episode's turns go to the server that holds its prefix unless that server is overloaded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from engine_harness import ServedEngine, build_embedded, run_async

from agentrl.engines.base import SamplingParams
from agentrl.engines.routing import BLOCK_TOKENS, ServerPicker
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.sglang.http import SGLangEngine

A, B = "http://a", "http://b"


def test_a_prompt_extending_an_earlier_one_goes_to_its_server() -> None:
    picker = ServerPicker([A, B], "sticky", slack=2)
    turn1 = list(range(3 * BLOCK_TOKENS))
    assert picker.pick(turn1, {A: 1, B: 0}) == B  # nothing held yet: least loaded
    picker.record(turn1, B)
    turn2 = turn1 + list(range(500, 540))
    assert picker.pick(turn2, {A: 0, B: 2}) == B  # held by B, within the slack
    assert picker.pick(turn2, {A: 0, B: 3}) == A  # B is overloaded: locality yields to balance
    other = [7] * (3 * BLOCK_TOKENS)
    assert picker.pick(other, {A: 0, B: 1}) == A  # another prompt: least loaded
    assert ServerPicker([A, B], "least_loaded").pick(turn2, {A: 0, B: 1}) == A
    with pytest.raises(ValueError, match="sticky"):
        ServerPicker([A], "random")


def test_an_episodes_turns_stay_on_one_server_over_http(tiny_model_dir: Path) -> None:
    inners = [build_embedded(tiny_model_dir), build_embedded(tiny_model_dir)]
    try:
        with ServedEngine(inners[0]) as a, ServedEngine(inners[1]) as b:
            client = SGLangEngine(SGLangEngineConfig(urls=[a.url, b.url], routing="sticky"))
            params = SamplingParams(max_new_tokens=8, ignore_eos=True)

            async def episode(seed: int) -> tuple[list[str], int]:
                history = [(seed * 31 + i) % 1000 + 1 for i in range(2 * BLOCK_TOKENS)]
                servers, cached = [], 0
                for turn in range(3):
                    result = await client.generate(history, params)
                    servers.append(result.extra["server"])
                    cached += result.cached_tokens if turn else 0
                    history = history + result.output_ids + [5, 6, 7]  # the env's observation tokens
                return servers, cached

            results = run_async(client, lambda: asyncio.gather(*(episode(s) for s in range(4))))
    finally:
        for inner in inners:
            asyncio.run(inner.close())
    assert all(len(set(servers)) == 1 for servers, _ in results)  # every episode kept its server
    assert len({servers[0] for servers, _ in results}) == 2  # and episodes spread over both
    assert all(cached > 0 for _, cached in results)  # later turns reused the server's cached prefix
