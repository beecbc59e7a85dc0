"""Which SGLang workers stand behind each configured URL: a server is its own worker; an sglang-router
lists its workers at ``GET /workers``.

sglang-router (PyPI ``sglang-router`` 0.3.x) forwards ``/generate`` and ``/flush_cache`` but answers 404
to ``/abort_request``, ``/update_weights_from_disk|tensor``, ``/pause_generation`` and ``/server_info``
(checked against the real binary in tests/engines/test_router.py). So aborts, weight updates and the
settings check go to the workers themselves, and a URL that is neither a server nor a router that lists
its workers is refused: behind it aborts would be impossible.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from agentrl.engines.http_base import HttpTransport, error_text
from agentrl.engines.sglang.settings import ServerSettings, read_settings
from agentrl.engines.sglang.wire import version_from_wire
from agentrl.errors import EngineConfigError, EngineError

SERVER_INFO = ("/server_info", "/get_server_info")  # 0.5.10+ name first
MODEL_INFO = ("/model_info", "/get_model_info")


@dataclass
class Entry:
    """One configured URL and the workers that serve its requests."""

    url: str
    is_router: bool
    workers: list[str] = field(default_factory=list)


async def discover(http: HttpTransport, url: str) -> Entry:
    """Classify ``url`` (server or router) and list the workers behind it."""
    status, server_info = await http.get_first(url, SERVER_INFO)
    if status == 200 and isinstance(server_info, dict) and "version" in server_info:
        return Entry(url, is_router=False, workers=[url])
    workers = await list_router_workers(http, url)
    if workers is None:
        raise EngineConfigError(
            f"{url} is neither an SGLang server (GET /server_info: HTTP {status}, {error_text(server_info)[:120]}) nor "
            "an "
            "sglang-router that lists its workers (GET /workers); aborts and weight updates could not reach the "
            "servers behind it. List the servers in engine.urls, or put them behind sglang-router"
        )
    return Entry(url, is_router=True, workers=workers)


async def list_router_workers(http: HttpTransport, url: str) -> list[str] | None:
    """The worker URLs an sglang-router lists (None when ``url`` is not such a router)."""
    status, body = await http.call("GET", url, "/workers")
    if status != 200 or not isinstance(body, dict) or not isinstance(body.get("workers"), list):
        return None
    urls = [str(w["url"]).rstrip("/") for w in body["workers"] if isinstance(w, dict) and w.get("url")]
    if not urls:
        raise EngineError(f"sglang-router {url} lists no workers (GET /workers); add servers to it first")
    return urls


async def read_worker(http: HttpTransport, url: str) -> tuple[ServerSettings, int]:
    """A worker's checked settings and the weight version it serves now (from /model_info)."""
    status, server_info = await http.get_first(url, SERVER_INFO)
    if status != 200:
        raise EngineError(f"{url}/server_info failed (HTTP {status}): {error_text(server_info)}")
    settings = read_settings(url, server_info)
    status, model = await http.get_first(url, MODEL_INFO)
    current: Any = model.get("weight_version") if status == 200 and isinstance(model, dict) else None
    return settings, version_from_wire(current if current is not None else server_info.get("weight_version"))


async def read_workers(http: HttpTransport, urls: list[str]) -> dict[str, tuple[ServerSettings, int]]:
    """``read_worker`` for every URL, concurrently."""
    results = await asyncio.gather(*(read_worker(http, u) for u in urls))
    return dict(zip(urls, results))
