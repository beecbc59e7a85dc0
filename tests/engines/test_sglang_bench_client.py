"""What SGLang 0.5.23's benchmark client (``python -m sglang.benchmark.serving --backend sglang``) needs from a
server, checked against ``agentrl serve``: its default readiness probe (``GET /v1/models``, which must answer
200) and its request body (``async_request_sglang_generate`` in ``sglang/benchmark/serving.py``: ``text``, three
sampling fields, ``lora_path``, ``return_routed_experts``, ``logprob_start_len``; ``--disable-stream``).

The client itself cannot run on these CPU machines: ``sglang.benchmark.serving`` imports
``sglang.srt.disaggregation.utils`` -> ``sglang.srt.configs`` -> ``sglang.srt.multimodal.internvl_utils`` ->
``torchvision``, whose PyPI builds link ``libtorch_cuda.so``/``libc10_cuda.so``, absent from the CPU torch build
(``torchvision::nms does not exist`` at import); see docs/engines.md.
"""

from __future__ import annotations

import asyncio

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
