"""Bad input and faults: each gives a clear error (naming the URL for servers), nothing hangs."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from engine_harness import ServedEngine, run_async

from agentrl.engines.base import SamplingParams
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.sglang.http import SGLangEngine
from agentrl.errors import EngineConfigError, EngineError


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _client(url: str, **overrides: Any) -> SGLangEngine:
    return SGLangEngine(SGLangEngineConfig(**{"urls": [url], "max_retries": 2, "request_timeout_s": 30, **overrides}))


def test_unreachable_server_names_the_url() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    client = _client(url)
    started = time.monotonic()
    with pytest.raises(EngineError, match=url.replace(".", r"\.")):
        run_async(client, lambda: client.generate([1, 2], SamplingParams(max_new_tokens=2)))
    assert time.monotonic() - started < 10
    assert run_async(client, client.health) is False


def test_empty_and_out_of_vocab_input_ids(engine: Any) -> None:
    with pytest.raises(EngineError, match="empty"):
        run_async(engine, lambda: engine.generate([], SamplingParams(max_new_tokens=2)))
    with pytest.raises(EngineError, match="vocabulary"):
        run_async(engine, lambda: engine.generate([10**7], SamplingParams(max_new_tokens=2)))


def test_prompt_longer_than_context(engine: Any) -> None:
    with pytest.raises(EngineError, match="context of 2048 tokens"):
        run_async(engine, lambda: engine.generate([1] * 2100, SamplingParams(max_new_tokens=2)))


def test_completion_is_capped_by_context(engine: Any) -> None:
    result = run_async(engine, lambda: engine.generate([1] * 2040, SamplingParams(max_new_tokens=50, ignore_eos=True)))
    assert result.finish_reason == "length" and len(result.output_ids) == 2048 - 2040


def test_http_400_body_is_reported(served: ServedEngine) -> None:
    async def body() -> tuple[int, Any]:
        async with aiohttp.ClientSession() as session:
            payload = {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 2, "frequency_penalty": 0.5}}
            async with session.post(served.url + "/generate", json=payload) as resp:
                return resp.status, await resp.json()

    status, reply = asyncio.run(body())
    assert status == 400 and "frequency_penalty" in reply["error"]["message"]


def test_request_timeout_is_an_error_and_frees_the_server(served: ServedEngine) -> None:
    client = _client(served.url, request_timeout_s=0.5)
    with pytest.raises(EngineError, match="did not answer within"):
        run_async(client, lambda: client.generate([1, 2], SamplingParams(max_new_tokens=2000, ignore_eos=True)))
    deadline = time.monotonic() + 10  # the dropped connection aborts the request server-side
    while served.engine.active_request_ids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert served.engine.active_request_ids() == []


def test_truncated_sampling_refused_for_training(served: ServedEngine) -> None:
    client = _client(served.url)
    with pytest.raises(EngineConfigError, match="top_p=0.9"):
        run_async(client, lambda: client.generate([1, 2], SamplingParams(max_new_tokens=2, top_p=0.9)))
    allowed = _client(served.url, allow_truncated_sampling=True)
    result = run_async(allowed, lambda: allowed.generate([1, 2], SamplingParams(max_new_tokens=2, top_p=0.9)))
    assert len(result.output_ids) >= 1


def test_server_only_setting_is_reported_not_read_from_the_client(
    served: ServedEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SGLANG_RETURN_ORIGINAL_LOGPROB is the server's environment: the client's says nothing about it, and
    the dry-run lines say it cannot be checked over HTTP instead of passing it silently."""
    monkeypatch.setenv("SGLANG_RETURN_ORIGINAL_LOGPROB", "true")
    client = _client(served.url)

    async def body() -> tuple[list[str], Any]:
        return await client.probe(), await client.generate([1, 2], SamplingParams(max_new_tokens=2))

    lines, result = run_async(client, body)
    assert len(result.output_ids) >= 1
    assert any("SGLANG_RETURN_ORIGINAL_LOGPROB" in line and "not visible over HTTP" in line for line in lines)
    assert any(served.url in line and "tp_size 1" in line and "weight_version 0" in line for line in lines)


def test_rid_prefix_abort_and_queued_reply_shape(served: ServedEngine) -> None:
    """SGLang aborts by rid prefix; a queued request gets the 'Abort in waiting queue' reply."""
    long = {"max_new_tokens": 2000, "ignore_eos": True}

    async def body() -> list[Any]:
        async with aiohttp.ClientSession() as session:

            async def gen(rid: str) -> Any:
                async with session.post(
                    served.url + "/generate",
                    json={"input_ids": [1, 2, 3], "sampling_params": long, "rid": rid, "return_logprob": True},
                ) as resp:
                    return await resp.json()

            tasks = [asyncio.ensure_future(gen(f"job{i}-{'x' * 28}")) for i in range(4)]  # fills the 4 slots
            while served.engine.load()["num_running_reqs"] < 4:
                await asyncio.sleep(0.01)
            tasks.append(asyncio.ensure_future(gen(f"job4-{'x' * 28}")))  # queues
            while served.engine.load()["num_waiting_reqs"] < 1:
                await asyncio.sleep(0.01)
            async with session.post(served.url + "/abort_request", json={"rid": "job"}) as resp:
                assert resp.status == 200
            return await asyncio.gather(*tasks)

    replies = asyncio.run(body())
    assert all(r["meta_info"]["finish_reason"]["type"] == "abort" for r in replies)
    queued = replies[4]["meta_info"]
    assert queued["finish_reason"]["message"] == "Abort in waiting queue" and queued["output_token_logprobs"] == []
    assert "prompt_tokens" not in queued  # as SGLang 0.5.23's real server (docs/engines.md#sglangs-generate-api)
    running = replies[0]["meta_info"]
    assert [t[1] for t in running["output_token_logprobs"]] == replies[0]["output_ids"]
    assert running["weight_version"] == "0" and running["completion_tokens"] == len(replies[0]["output_ids"])


@pytest.mark.slow
def test_server_killed_mid_request(tiny_model_dir: Path) -> None:
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "agentrl.cli.main",
        "serve",
        "--model",
        str(tiny_model_dir),
        "--port",
        str(port),
        "--threads",
        "1",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    client = _client(f"http://127.0.0.1:{port}", max_retries=2)
    try:
        deadline = time.monotonic() + 90
        while not run_async(client, client.health):
            assert proc.poll() is None and time.monotonic() < deadline, "agentrl serve did not start"
            time.sleep(0.5)

        async def body() -> None:
            task = asyncio.ensure_future(client.generate([1, 2], SamplingParams(max_new_tokens=4000, ignore_eos=True)))
            await asyncio.sleep(0.5)
            os.kill(proc.pid, signal.SIGKILL)
            await task

        started = time.monotonic()
        with pytest.raises(EngineError, match=f"127.0.0.1:{port}"):
            run_async(client, body)
        assert time.monotonic() - started < 15
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
