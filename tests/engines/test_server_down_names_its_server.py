"""A server that cannot be reached is named by its kind, with how to start one: the vLLM backend shares the
SGLang backend's HTTP transport, whose errors once told a vLLM user to run scripts/launch_sglang.sh."""

from __future__ import annotations

import asyncio
import socket

import pytest

from agentrl.engines.http_base import HttpTransport, ServerDown
from agentrl.engines.vllm.config import VLLMEngineConfig
from agentrl.engines.vllm.http import VLLMEngine


def _closed_port() -> str:
    with socket.socket() as sock:  # bound, then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_the_transport_names_the_server_kind_it_is_given() -> None:
    with pytest.raises(ServerDown, match=r"^SGLang server .*scripts/launch_sglang\.sh"):
        asyncio.run(
            HttpTransport(0, server="SGLang server", start_hint="start one with scripts/launch_sglang.sh").call(
                "GET", _closed_port(), "/health"
            )
        )


def test_an_unreachable_vllm_server_is_named_as_vllm_with_how_to_start_it() -> None:
    url = _closed_port()
    engine = VLLMEngine(VLLMEngineConfig(urls=[url], max_retries=0))
    with pytest.raises(ServerDown) as info:
        asyncio.run(engine.http.call("GET", url, "/health"))
    message = str(info.value)
    assert message.startswith(f"vLLM server {url}") and "VLLM_SERVER_DEV_MODE=1" in message
    assert "SGLang" not in message and "launch_sglang" not in message
