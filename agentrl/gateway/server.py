"""The gateway's HTTP server: OpenAI-compatible endpoints per conversation, on a private event-loop thread.

One server per process, started on first use, bound to 127.0.0.1 on a free port. A conversation's base URL
is ``http://127.0.0.1:PORT/ep/<key>/v1`` (``key`` random per conversation, so a stale agent of a finished,
restarted or killed episode reaches nothing) and its bearer key is its own. Served: ``GET /models`` and
``POST /chat/completions`` (``stream: true`` as a buffered stream); any other path answers 404 saying what
is served. Its own thread keeps agents answered while the trainer's update blocks the rollout's loop, and
Python agents run on it too.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from aiohttp import web

from agentrl.errors import OpenAIRequestError
from agentrl.gateway.protocol import plan_chat_request
from agentrl.gateway.session import AgentSession
from agentrl.openai_api.responses import error_body
from agentrl.openai_api.streaming import chat_stream_events

T = TypeVar("T")
SERVED = "the agentrl gateway serves GET /models and POST /chat/completions under each episode's base URL"


class GatewayServer:
    """The process's gateway (see the module docstring); ``gateway_server()`` returns the shared one."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        # Plain-def agents and their blocking clients run in threads: never let a small pool starve them.
        self.loop.set_default_executor(ThreadPoolExecutor(256, thread_name_prefix="agentrl-agent"))
        self._sessions: dict[str, AgentSession] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agentrl-gateway", daemon=True)
        self._thread.start()
        self.port: int = self.run(self._serve()).result(timeout=30)

    @property
    def url(self) -> str:
        """The server's root URL."""
        return f"http://127.0.0.1:{self.port}"

    def run(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coro`` on the gateway's loop (from any thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def on_own_thread(self) -> bool:
        """True when called from the gateway's loop thread (where blocking on it would deadlock)."""
        return threading.current_thread() is self._thread

    def open_session(self, model: str) -> AgentSession:
        """A new conversation's session with a fresh URL key and bearer key; ``model`` is the id it reports."""
        session = AgentSession(secrets.token_hex(12), f"agentrl-{secrets.token_hex(16)}", self.loop, model)
        with self._lock:
            self._sessions[session.key] = session
        return session

    def close_session(self, session: AgentSession, message: str) -> None:
        """Answer the session's unanswered calls with ``message`` and stop routing to it."""
        session.close(message)
        with self._lock:
            self._sessions.pop(session.key, None)

    async def _serve(self) -> int:
        app = web.Application(client_max_size=32 * 1024**2)
        app.add_routes(
            [
                web.get("/ep/{key}/v1/models", self._models),
                web.post("/ep/{key}/v1/chat/completions", self._chat),
                web.route("*", "/{tail:.*}", self._not_served),
            ]
        )
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return int(runner.addresses[0][1])

    def _session(self, request: web.Request) -> AgentSession | web.Response:
        with self._lock:
            session = self._sessions.get(request.match_info["key"])
        if session is None:
            return _json(
                404,
                error_body(
                    "no episode at this URL on this gateway: it finished, was restarted, or belongs to a job that "
                    "ended; an agent gets a fresh base URL per episode",
                    404,
                ),
            )
        if request.headers.get("Authorization", "") != f"Bearer {session.api_key}":
            return _json(401, error_body("wrong API key: use the OPENAI_API_KEY the gateway gave this episode", 401))
        return session

    async def _models(self, request: web.Request) -> web.Response:
        session = self._session(request)
        if isinstance(session, web.Response):
            return session
        model = {"id": session.model, "object": "model", "created": int(time.time()), "owned_by": "agentrl"}
        return _json(200, {"object": "list", "data": [model]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        session = self._session(request)
        if isinstance(session, web.Response):
            return session
        try:
            plan = plan_chat_request(await request.json())
        except json.JSONDecodeError as exc:
            return _json(400, error_body(f"the request body is not JSON: {exc}", 400))
        except OpenAIRequestError as exc:
            return _json(400, error_body(str(exc), 400))
        answer = await session.submit(plan)
        if not plan.stream or answer.status != 200:
            return _json(answer.status, answer.body)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for event in chat_stream_events(answer.body, plan.include_usage):
            await response.write(event)
        await response.write_eof()
        return response

    async def _not_served(self, request: web.Request) -> web.Response:
        return _json(404, error_body(f"{request.method} {request.path} is not served: {SERVED}", 404))


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=status, dumps=lambda obj: json.dumps(obj, ensure_ascii=False))


_SERVER: GatewayServer | None = None
_SERVER_LOCK = threading.Lock()


def gateway_server() -> GatewayServer:
    """The process's gateway server, started on first use."""
    global _SERVER
    with _SERVER_LOCK:
        if _SERVER is None:
            _SERVER = GatewayServer()
        return _SERVER
