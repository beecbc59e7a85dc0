"""What the HTTP engines (SGLang, vLLM) share: JSON calls with bounded retries, and the client-side
bookkeeping of servers and in-flight requests.

``HttpTransport``: one aiohttp session per event loop; connection errors and 5xx are retried with backoff; a
server that stays down raises ``ServerDown`` naming its kind and how to start one; any other status is returned
to the caller, which knows what the route should answer. ``HttpEngineBase``: the configured URLs, which server
gets a request and how loaded each is, the requests in flight (their server, the task that awaits the reply, an
event set when it returned), the health check, ``close`` and the run's model identity.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from agentrl.engines.base import ModelIdentity, SamplingParams
from agentrl.engines.routing import ServerPicker
from agentrl.errors import EngineConfigError, EngineError

CONTROL_TIMEOUT_S = 30.0


class ServerDown(EngineError):
    """A server could not be reached (connection refused or reset, or 5xx on every attempt)."""


class HttpTransport:
    """JSON over HTTP with retries; the session is rebuilt when called from another event loop.

    ``server`` and ``start_hint`` name the kind of server and how to start one in the errors."""

    def __init__(self, max_retries: int, *, server: str, start_hint: str) -> None:
        self.max_retries = max_retries
        self.server = server
        self.start_hint = start_hint
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None

    def _http(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            # a session is bound to its event loop; tests and CLIs may run several loops in turn
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
            self._session_loop = loop
        return self._session

    async def call(
        self,
        method: str,
        url: str,
        path: str,
        body: dict[str, Any] | None = None,
        timeout_s: float = CONTROL_TIMEOUT_S,
        *,
        retries: int | None = None,
    ) -> tuple[int, Any]:
        """One request with bounded retries on connection errors and 5xx; returns (status, body)."""
        attempts = (self.max_retries if retries is None else retries) + 1
        last = ""
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(min(0.1 * 2 ** (attempt - 1), 2.0))
            try:
                timeout = aiohttp.ClientTimeout(total=timeout_s)
                async with self._http().request(method, url + path, json=body, timeout=timeout) as resp:
                    text = await resp.text()
                    if resp.status >= 500:
                        last = f"HTTP {resp.status}: {text[:300]}"
                        continue
                    return resp.status, _maybe_json(text)
            except asyncio.TimeoutError as exc:
                raise EngineError(
                    f"{self.server} {url}{path} did not answer within {timeout_s:.0f} s (engine.request_timeout_s)"
                ) from exc
            except aiohttp.ClientError as exc:
                last = f"{type(exc).__name__}: {exc}"
        raise ServerDown(
            f"{self.server} {url} failed {attempts} attempt(s) at {path}: {last}; is it running and reachable? "
            f"({self.start_hint})"
        )

    async def get_first(self, url: str, paths: tuple[str, ...]) -> tuple[int, Any]:
        """GET the first of ``paths`` the server knows (newer route names first); (404, None) if none."""
        for path in paths:
            status, body = await self.call("GET", url, path)
            if status != 404:
                return status, body
        return 404, None

    async def close(self) -> None:
        """Close the session (idempotent)."""
        if self._session is not None and not self._session.closed:
            await self._session.close()


def _maybe_json(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return text


def error_text(reply: Any) -> str:
    """The message of an error reply (``{"error": {"message": ...}}`` and variants)."""
    if isinstance(reply, dict):
        err = reply.get("error", reply.get("message", reply))
        return str(err.get("message", err) if isinstance(err, dict) else err)[:500]
    return str(reply)[:500]


@dataclass
class InFlight:
    """One request the client awaits: the server it went to, its HTTP call (once sent), whether the client cut it
    (``cut``), and an event set when it returned."""

    url: str
    call: asyncio.Task[Any] | None = None
    cut: bool = False
    returned: asyncio.Event = field(default_factory=asyncio.Event)


class HttpEngineBase:
    """The bookkeeping both HTTP engines share; a subclass adds its wire format, aborts and weight updates."""

    server_kind = "server"  # how errors name a server ("SGLang server", "vLLM server")

    def __init__(self, urls: list[str], http: HttpTransport, picker: ServerPicker, model_path: str | None) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        self.http = http
        self.picker = picker
        self.model_path = model_path  # what the servers serve (the run's model.path), for model_identity
        self._load = {u: 0 for u in self.urls}
        self._inflight: dict[str, InFlight] = {}

    @asynccontextmanager
    async def _sending(self, rid: str, input_ids: list[int]) -> AsyncIterator[str]:
        """Pick the server for ``input_ids`` and track the request as in flight there until the block ends."""
        url = self.picker.pick(input_ids, self._load)
        entry = InFlight(url)
        self._inflight[rid] = entry
        self._load[url] += 1
        self.picker.record(input_ids, url)
        try:
            yield url
        finally:
            self._load[url] -= 1
            self._inflight.pop(rid, None)
            entry.returned.set()

    async def _post(self, url: str, path: str, body: dict[str, Any], timeout_s: float, rid: str) -> Any:
        """POST a generation request; any status but 200 raises EngineError naming the server and request.
        Returns None when ``_cut`` closed the call (the server sees the client leave and aborts the request)."""
        entry = self._inflight[rid]
        entry.call = asyncio.ensure_future(self.http.call("POST", url, path, body, timeout_s))
        try:
            status, reply = await asyncio.shield(entry.call)  # a cut cancels the call, not this coroutine
        except asyncio.CancelledError:
            if entry.cut and entry.call.cancelled():
                return None
            entry.call.cancel()
            raise
        if status != 200:
            raise EngineError(
                f"{self.server_kind} {url}{path} rejected request {rid} (HTTP {status}): {error_text(reply)}"
            )
        return reply

    def _cut(self, rid: str) -> None:
        """Close request ``rid``'s HTTP call: its ``_post`` returns None, and nothing else on the server is cut."""
        entry = self._inflight.get(rid)
        if entry is not None and entry.call is not None and not entry.call.done():
            entry.cut = True
            entry.call.cancel()

    async def _wait_returned(self, rids: list[str], timeout_s: float) -> None:
        """Wait (bounded) until the requests ``rids`` returned."""
        pending = [self._inflight[r].returned for r in rids if r in self._inflight]
        if pending:
            await asyncio.wait([asyncio.ensure_future(e.wait()) for e in pending], timeout=timeout_s)

    def _refuse_truncated(self, sampling: SamplingParams, allowed: bool, why: str) -> None:
        """Top-p/top-k sampling makes the server's logprobs differ from the full-vocabulary ones the loss needs."""
        truncated = sampling.top_p < 1.0 or sampling.top_k > 0
        if truncated and sampling.temperature > 0 and not allowed:
            raise EngineConfigError(
                f"top_p={sampling.top_p}, top_k={sampling.top_k}: {why}; use top_p=1, top_k=-1 for training, or "
                "set engine.allow_truncated_sampling=true (eval only)"
            )

    async def _healthy(self, url: str) -> bool:
        """One server's health: /health answers 200 (a subclass may check more)."""
        status, _ = await self.http.call("GET", url, "/health", None, CONTROL_TIMEOUT_S)
        return status == 200

    async def health(self) -> bool:
        """True when every configured URL is healthy."""

        async def one(url: str) -> bool:
            try:
                return await self._healthy(url)
            except EngineError:
                return False

        return all(await asyncio.gather(*(one(u) for u in self.urls)))

    def model_identity(self) -> ModelIdentity:
        """The model directory the run config names (the servers' own paths may differ); no config read here."""
        return ModelIdentity(path=self.model_path)

    async def close(self) -> None:
        """Close the HTTP session (idempotent)."""
        await self.http.close()
