"""What SGLang 0.5.23's benchmark client (``python -m sglang.benchmark.serving --backend sglang``) needs from a
server, checked against ``agentrl serve``: its default readiness probe (``GET /v1/models``, which must answer
200) and its request body (``async_request_sglang_generate`` in ``sglang/benchmark/serving.py``: ``text``, three
sampling fields, ``lora_path``, ``return_routed_experts``, ``logprob_start_len``), streaming by default (SSE
``data:`` lines ending in ``data: [DONE]``) or not (``--disable-stream``).

The client itself runs in .venv-sglang (scripts/setup_sglang.sh) against both servers in
tests/sglang_real/test_live_server.py; this test keeps the contract visible without that venv.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
from engine_harness import ServedEngine


def test_readiness_probe_and_request_shape_of_sglangs_bench_client(served: ServedEngine) -> None:
    async def body() -> tuple[int, dict, int, dict]:
        async with aiohttp.ClientSession() as session:
            async with session.get(served.url + "/v1/models") as resp:
                ready, models = resp.status, await resp.json()
            payload = {  # the keys serving.py sends for --backend sglang --disable-stream
                "text": "The quick brown fox",
                "sampling_params": {"temperature": 0.0, "max_new_tokens": 12, "ignore_eos": True},
                "stream": False,
                "lora_path": None,
                "return_logprob": False,
                "return_routed_experts": False,
                "logprob_start_len": -1,
            }
            async with session.post(served.url + "/generate", json=payload) as resp:
                return ready, models, resp.status, await resp.json()

    ready, models, status, reply = asyncio.run(body())
    assert ready == 200 and models["data"][0]["id"] == served.engine.model_path
    assert status == 200 and reply["meta_info"]["completion_tokens"] == 12 and isinstance(reply["text"], str)


def test_streaming_requests_get_sglangs_sse_framing(served: ServedEngine) -> None:
    """The benchmark client's default is stream=true: SSE chunks of the reply object, then [DONE]."""

    async def body() -> tuple[int, str, list[bytes]]:
        payload = {"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}}
        async with aiohttp.ClientSession() as session:
            async with session.post(served.url + "/generate", json={**payload, "stream": True}) as resp:
                return resp.status, resp.headers["Content-Type"], [line async for line in resp.content]

    status, content_type, lines = asyncio.run(body())
    events = [line.strip() for line in lines if line.strip()]
    assert status == 200 and content_type.startswith("text/event-stream")
    assert events[-1] == b"data: [DONE]" and all(e.startswith(b"data: ") for e in events)
    last = json.loads(events[-2][len(b"data: ") :])
    assert last["meta_info"]["completion_tokens"] == 5 and last["meta_info"]["finish_reason"]["type"] == "length"
