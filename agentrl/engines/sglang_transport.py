"""HTTP calls to SGLang servers and routers: one aiohttp session per event loop, bounded retries.

Connection errors and 5xx are retried with backoff; a server that stays down raises EngineError naming
its URL; any other status is returned to the caller, which knows what the route should answer.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from agentrl.errors import EngineError

CONTROL_TIMEOUT_S = 30.0


class ServerDown(EngineError):
    """A server could not be reached (connection refused or reset, or 5xx on every attempt)."""


class HttpTransport:
    """JSON over HTTP with retries; the session is rebuilt when called from another event loop.

    ``server`` and ``start_hint`` name the kind of server and how to start one in the errors (SGLang's by
    default; the vLLM backend passes its own)."""

    def __init__(
        self,
        max_retries: int,
        *,
        server: str = "SGLang server",
        start_hint: str = "start one with scripts/launch_sglang.sh or `agentrl serve`",
    ) -> None:
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
    """The message of an SGLang error reply (``{"error": {"message": ...}}`` and variants)."""
    if isinstance(reply, dict):
        err = reply.get("error", reply.get("message", reply))
        return str(err.get("message", err) if isinstance(err, dict) else err)[:500]
    return str(reply)[:500]
