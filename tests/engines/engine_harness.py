"""Engine test harness: serve an EmbeddedEngine over real HTTP on 127.0.0.1, run coroutines against
either backend, wait for requests to be decoding, build fresh tiny-model engines."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import torch
from aiohttp import web

from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.engines.embedded.engine import EmbeddedEngine
from agentrl.engines.sglang.http import SGLangEngine
from agentrl.serve.server import make_runner


class ServedEngine:
    """Serve an EmbeddedEngine over HTTP on 127.0.0.1 from a background event loop."""

    def __init__(self, engine: EmbeddedEngine) -> None:
        self.engine = engine
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner: web.AppRunner | None = None
        self.url = ""

    def __enter__(self) -> ServedEngine:
        self.thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(timeout=30)
        return self

    async def _start(self) -> str:
        self.runner = make_runner(self.engine)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        return f"http://{host}:{port}"

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def run_async(engine: Any, body: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``body()`` in a fresh event loop; an HTTP client's session is closed inside that loop."""

    async def main() -> Any:
        try:
            return await asyncio.wait_for(body(), timeout=120)
        finally:
            if isinstance(engine, SGLangEngine):
                await engine.close()

    return asyncio.run(main())


async def wait_running(engine: Any, n: int, timeout_s: float = 30.0) -> None:
    """Wait until ``n`` requests are decoding (each has sampled >= 1 token), in process or via /server_info."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        if isinstance(engine, SGLangEngine):
            async with aiohttp.ClientSession() as session, session.get(engine.urls[0] + "/server_info") as resp:
                running = (await resp.json())["internal_states"][0]["num_running_reqs"]
        else:
            running = engine.load()["num_running_reqs"]
        if running >= n:
            return
        assert asyncio.get_running_loop().time() < deadline, f"only {running} of {n} requests started"
        await asyncio.sleep(0.01)


def build_embedded(model_dir: Path, **overrides: Any) -> EmbeddedEngine:
    """A fresh embedded engine on the tiny model (small batch so queueing is easy to provoke)."""
    cfg = EmbeddedEngineConfig(**{"max_batch_size": 4, "max_seq_len": 2048, "seed": 0, **overrides})
    return EmbeddedEngine.from_pretrained(model_dir, config=cfg)


def reference_logprobs(
    model: torch.nn.Module, prompt: list[int], output: list[int], temperature: float
) -> torch.Tensor:
    """log_softmax(logits.float() / T) of each output token, from one forward over the whole sequence."""
    ids = torch.tensor([prompt + output])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(1, torch.tensor(output)[:, None]).squeeze(1)
