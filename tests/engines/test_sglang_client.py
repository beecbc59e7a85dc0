"""The SGLang client reads the servers' weight versions (GET /model_info) and checks every reply's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from engine_harness import ServedEngine, build_embedded, run_async

from agentrl.engines.base import SamplingParams
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.sglang.http import SGLangEngine
from agentrl.errors import EngineConfigError, EngineError

PARAMS = SamplingParams(max_new_tokens=4, ignore_eos=True)


async def _set_version(url: str, model_dir: Path, version: str) -> None:
    """Load weights on a server behind the client's back (as a restart or another trainer would)."""
    async with aiohttp.ClientSession() as session:
        body = {"model_path": str(model_dir), "weight_version": version}
        async with session.post(url + "/update_weights_from_disk", json=body) as resp:
            assert resp.status == 200


def test_version_read_at_probe_and_a_rolled_back_server_is_an_error(served: ServedEngine, tiny_model_dir: Path) -> None:
    client = SGLangEngine(SGLangEngineConfig(urls=[served.url], max_retries=0))

    async def body() -> int:
        await _set_version(served.url, tiny_model_dir, "5")  # the server already serves version 5
        await client.generate([1, 2, 3], PARAMS)
        probed = client.weight_version
        await client.update_weights(str(tiny_model_dir), version=6)
        await _set_version(served.url, tiny_model_dir, "2")  # rolled back behind the client's back
        with pytest.raises(EngineError, match="weight_version 2, but the policy is at version 6"):
            await client.generate([1, 2, 3], PARAMS)
        return probed

    assert run_async(client, body) == 5


def test_servers_on_different_versions_are_refused(tiny_model_dir: Path) -> None:
    inners = [build_embedded(tiny_model_dir), build_embedded(tiny_model_dir)]
    try:
        with ServedEngine(inners[0]) as a, ServedEngine(inners[1]) as b:
            asyncio.run(_set_version(b.url, tiny_model_dir, "3"))
            client = SGLangEngine(SGLangEngineConfig(urls=[a.url, b.url], max_retries=0))
            with pytest.raises(EngineConfigError, match="different weight versions"):
                run_async(client, lambda: client.generate([1, 2], PARAMS))
    finally:
        for inner in inners:
            asyncio.run(inner.close())
