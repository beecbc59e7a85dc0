"""``agentrl serve`` routes and shapes, spoken raw over HTTP (the SGLang 0.5.x subset)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from engine_harness import ServedEngine, build_embedded


def _calls(url: str, calls: list[tuple[str, str, Any]]) -> list[tuple[int, Any]]:
    async def body() -> list[tuple[int, Any]]:
        out = []
        async with aiohttp.ClientSession() as session:
            for method, path, payload in calls:
                async with session.request(method, url + path, json=payload) as resp:
                    text = await resp.text()
                    is_json = resp.content_type == "application/json"
                    out.append((resp.status, await resp.json() if is_json else text))
        return out

    return asyncio.run(body())


def test_batched_generate_returns_a_list(served: ServedEngine) -> None:
    payload = {
        "input_ids": [[1, 2, 3], [4, 5]],
        "sampling_params": [
            {"max_new_tokens": 3, "ignore_eos": True},
            {"max_new_tokens": 5, "ignore_eos": True, "temperature": 0},
        ],
        "rid": ["a" * 32, "b" * 32],
        "return_logprob": True,
    }
    [(status, replies)] = _calls(served.url, [("POST", "/generate", payload)])
    assert status == 200 and isinstance(replies, list) and len(replies) == 2
    assert [r["meta_info"]["id"] for r in replies] == ["a" * 32, "b" * 32]
    assert [len(r["output_ids"]) for r in replies] == [3, 5]
    for reply in replies:
        meta = reply["meta_info"]
        assert meta["finish_reason"] == {"type": "length", "length": len(reply["output_ids"])}
        assert [t[1] for t in meta["output_token_logprobs"]] == reply["output_ids"]
        assert all(t[2] is None for t in meta["output_token_logprobs"])
        assert meta["prompt_tokens"] in (2, 3) and meta["cached_tokens"] == 0 and meta["weight_version"] == "0"


def test_bad_batch_item_is_a_400_and_nothing_keeps_running(served: ServedEngine) -> None:
    payload = {"input_ids": [[1, 2, 3], []], "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}}
    [(status, reply)] = _calls(served.url, [("POST", "/generate", payload)])
    assert status == 400 and "empty" in reply["error"]["message"]
    assert served.engine.active_request_ids() == []


def test_info_health_flush_and_disk_update_routes(served: ServedEngine, tiny_model_dir: Path) -> None:
    update = {"model_path": str(tiny_model_dir), "weight_version": "9", "abort_all_requests": True}
    results = _calls(
        served.url,
        [
            ("GET", "/health", None),
            ("GET", "/health_generate", None),
            ("GET", "/model_info", None),
            ("POST", "/update_weights_from_disk", update),
            ("GET", "/get_model_info", None),
            ("GET", "/server_info", None),
            ("POST", "/flush_cache", None),
            ("POST", "/update_weights_from_disk", {"model_path": "/no/such/dir"}),
        ],
    )
    health, health_gen, info, upd, info2, server, flush, bad = results
    assert health[0] == health_gen[0] == 200
    assert info[1]["weight_version"] == "0" and info[1]["is_generation"] is True
    assert upd == (200, {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0})
    assert info2[1]["weight_version"] == "9"
    assert server[1]["context_length"] == 2048 and server[1]["tp_size"] == 1 and server[1]["weight_version"] == "0"
    assert server[1]["version"].startswith("agentrl-serve-") and "logprob_semantics" not in server[1]
    assert flush[0] == 200
    assert bad[0] == 400 and bad[1]["success"] is False and "safetensors" in bad[1]["message"]


@pytest.mark.parametrize("routing", ["round_robin", "least_loaded", "sticky"])
def test_requests_spread_over_several_servers(tiny_model_dir: Path, routing: str) -> None:
    from engine_harness import run_async

    from agentrl.engines.base import SamplingParams
    from agentrl.engines.sglang.config import SGLangEngineConfig
    from agentrl.engines.sglang.http import SGLangEngine

    inners = [build_embedded(tiny_model_dir), build_embedded(tiny_model_dir)]
    try:
        with ServedEngine(inners[0]) as a, ServedEngine(inners[1]) as b:
            client = SGLangEngine(SGLangEngineConfig(urls=[a.url, b.url], routing=routing))

            async def body() -> list[Any]:
                params = SamplingParams(max_new_tokens=20, ignore_eos=True)
                results = await asyncio.gather(*(client.generate([1, 2, i], params) for i in range(6)))
                await client.update_weights(str(tiny_model_dir), version=2)  # every server gets the update
                return list(results)

            results = run_async(client, body)
            servers = {r.extra["server"] for r in results}
    finally:
        for inner in inners:
            asyncio.run(inner.close())
    assert servers == {a.url, b.url}
    assert [inner.weight_version for inner in inners] == [2, 2]
