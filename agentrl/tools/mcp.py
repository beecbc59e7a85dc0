"""Tools from an MCP server (stdio subprocess or streamable HTTP) for any ``MultiTurnEnv``.

``McpToolSource`` holds one MCP client session on a private event-loop thread, so the synchronous
``env.step`` (run in the rollout's thread pool) can list and call tools. Everything the model can
get wrong (unknown tool, bad arguments, a failing tool, a timeout, a dead server) comes back as an
``Error: ...`` tool message, never as an exception in the rollout. Needs the ``mcp`` SDK
(``pip install 'agentrl[mcp]'``); this module imports it only when a source starts.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from agentrl.chat.messages import Message, tool
from agentrl.errors import AgentRLError, ConfigError, did_you_mean
from agentrl.tools.toolcall import parse_tool_calls

T = TypeVar("T")
INSTALL_HINT = "pip install 'agentrl[mcp]'"


class McpError(AgentRLError, RuntimeError):
    """An MCP server cannot be started or reached (a configuration or infrastructure fault)."""


class McpStdioServer(BaseModel):
    """An MCP server started as a subprocess that speaks MCP on stdin/stdout."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    transport: Literal["stdio"] = Field("stdio", description="Transport name.")
    command: list[str] = Field(min_length=1, description="The server's argv, e.g. ['python', 'server.py'].")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables of the server.")
    cwd: str | None = Field(None, description="Working directory of the server process (None: ours).")


class McpHttpServer(BaseModel):
    """A running MCP server reached over streamable HTTP (e.g. ``http://127.0.0.1:8000/mcp``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    transport: Literal["http"] = Field("http", description="Transport name.")
    url: str = Field(pattern=r"^https?://", description="The server's MCP endpoint URL.")


McpServerConfig = Annotated[McpStdioServer | McpHttpServer, Field(discriminator="transport")]


class McpToolsConfig(BaseModel):
    """Which MCP server provides an env's tools, and how calls are bounded."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    server: McpServerConfig = Field(description="The MCP server: {transport: stdio, command: [...]} or {url: ...}.")
    include: list[str] | None = Field(None, description="Only these tool names are offered (None: all listed).")
    timeout_s: float = Field(30.0, gt=0, description="Wall-clock limit of one tool call (and of connecting).")
    max_chars: int = Field(10_000, ge=100, description="Longest tool result shown to the model (the rest is cut).")


class _LoopThread:
    """One daemon thread running an event loop that hosts every MCP session of this process."""

    _instance: _LoopThread | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="agentrl-mcp", daemon=True).start()

    @classmethod
    def get(cls) -> _LoopThread:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout_s)
        except FutureTimeout:
            future.cancel()
            raise


def _transport(server: McpStdioServer | McpHttpServer) -> Any:
    if isinstance(server, McpHttpServer):
        return server.url
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=server.command[0], args=list(server.command[1:]), env=dict(server.env) or None, cwd=server.cwd
    )
    return stdio_client(params)


def _without_titles(schema: Any) -> Any:
    """Servers built on pydantic title every property; the model reads the schema better without them."""
    if isinstance(schema, dict):
        return {k: _without_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    return [_without_titles(v) for v in schema] if isinstance(schema, list) else schema


def _schema(mcp_tool: Any) -> dict[str, Any]:
    parameters = _without_titles(dict(mcp_tool.input_schema or {"type": "object"}))
    parameters.setdefault("properties", {})
    parameters.setdefault("required", [])
    return {
        "type": "function",
        "function": {"name": mcp_tool.name, "description": mcp_tool.description or "", "parameters": parameters},
    }


def error_message(text: str) -> str:
    """``text`` as one tool-error message with exactly one ``Error:`` prefix.

    Servers built on the MCP SDK already start a failed call's text with "Error executing tool ...";
    prefixing again would show the model "Error: Error executing tool ...".
    """
    stripped = text.lstrip()
    for prefix in ("Error:", "Error "):
        if stripped.startswith(prefix):
            stripped = stripped[len(prefix) :].lstrip()
            break
    return f"Error: {stripped}"


def result_text(result: Any, max_chars: int) -> str:
    """The text a model reads for a ``CallToolResult``: text parts joined, other parts named; errors prefixed."""
    parts = [
        block.text if getattr(block, "type", "") == "text" else f"[{getattr(block, 'type', 'unknown')} content]"
        for block in result.content
    ]
    if not parts and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False, default=str)]
    text = "\n".join(parts) if parts else "(no output)"
    if len(text) > max_chars:
        text = f"{text[:max_chars]}\n[... output truncated: {len(text) - max_chars} more characters]"
    return error_message(text) if result.is_error else text


class McpToolSource:
    """One MCP client session: ``schemas()`` for the chat template, ``execute(text)`` for a model turn.

    Lifecycle: the session opens on first use (``start``) and lives until ``close``; a source whose
    server died is reopened by the next ``start`` (envs call it from ``reset``). One source per env
    instance gives every episode its own server state (stdio starts one process per source).
    """

    def __init__(self, config: McpToolsConfig | dict[str, Any]) -> None:
        self.config = config if isinstance(config, McpToolsConfig) else McpToolsConfig.model_validate(config)
        self._client: Any = None
        self._closing: asyncio.Event | None = None
        self._holder: Any = None
        self._schemas: list[dict[str, Any]] | None = None
        self.broken: str | None = None  # why the session is unusable, until the next start()

    def start(self) -> None:
        """Open the session (no-op when open and healthy); McpError names the server and the fix."""
        if self._client is not None and self.broken is None:
            return
        self.close()
        try:
            import mcp  # noqa: F401 - fail here with the install hint, not deep inside a thread
        except ImportError as exc:
            raise McpError(f"MCP tools need the mcp SDK, which is not installed: {INSTALL_HINT}") from exc
        loop = _LoopThread.get()
        ready: asyncio.Future[Any] = loop.loop.create_future()  # type: ignore[assignment]
        self._holder = asyncio.run_coroutine_threadsafe(self._hold(ready), loop.loop)
        try:
            self._client = loop.run(_await(ready), self.config.timeout_s)
        except Exception as exc:  # noqa: BLE001 - every way a server fails to start is one McpError
            self.close()
            raise McpError(
                f"cannot start/connect to the MCP server {self.config.server.model_dump(exclude_defaults=True)}: "
                f"{type(exc).__name__}: {exc}. Check the command/URL, run it by hand to see its errors, and make "
                f"sure the mcp SDK is installed ({INSTALL_HINT})"
            ) from exc
        self.broken = None

    async def _hold(self, ready: asyncio.Future[Any]) -> None:
        """Enter the client (transport + session) in one task and keep it open until close()."""
        from mcp.client import Client

        self._closing = asyncio.Event()
        try:
            async with Client(_transport(self.config.server), read_timeout_seconds=self.config.timeout_s) as client:
                ready.set_result(client)
                await self._closing.wait()
        except BaseException as exc:  # noqa: BLE001 - handed to start(), or marks a running source broken
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            else:
                self.broken = f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, Exception):
                raise

    def _run(self, make: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
        if self._client is None:
            self.start()
        if self.broken is not None:  # reopened only by start() (at reset): never silently mid-episode
            raise McpError(f"the MCP session failed earlier ({self.broken}); it reopens at the next reset")
        return _LoopThread.get().run(make(self._client), self.config.timeout_s)

    def _check_alive(self, failure: Exception) -> None:
        """After a failed call: a session that can no longer list its tools is marked broken."""
        try:
            _LoopThread.get().run(self._client.list_tools(cache_mode="bypass"), min(5.0, self.config.timeout_s))
        except Exception:  # noqa: BLE001 - any failure here means the session is gone
            self.broken = f"{type(failure).__name__}: {failure}"

    def schemas(self) -> list[dict[str, Any]]:
        """The server's tools as OpenAI/Qwen function schemas (listed once, then cached)."""
        if self._schemas is None:
            listed = self._run(lambda client: client.list_tools()).tools
            include = self.config.include
            if include is not None:
                unknown = [name for name in include if name not in {t.name for t in listed}]
                if unknown:
                    names = [t.name for t in listed]
                    raise ConfigError(
                        f"MCP tools {unknown} are not offered by the server.{did_you_mean(unknown[0], names)} "
                        f"It lists: {', '.join(names) or 'no tools'}; fix mcp include"
                    )
            self._schemas = [_schema(t) for t in listed if include is None or t.name in include]
        return list(self._schemas)

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Call one tool; every failure is returned as ``Error: ...`` text for the model."""
        names = [s["function"]["name"] for s in self.schemas()]
        if name not in names:
            return f"Error: unknown tool {name!r}.{did_you_mean(name, names)} Available tools: {', '.join(names)}."
        try:
            result = self._run(lambda client: client.call_tool(name, arguments))
        except (TimeoutError, FutureTimeout):
            return f"Error: tool {name!r} did not answer within {self.config.timeout_s:g} s"
        except McpError as exc:
            return f"Error: the tool server is unavailable: {exc}"
        except Exception as exc:  # noqa: BLE001 - protocol errors (bad arguments, ...) are feedback for the model
            self._check_alive(exc)
            return f"Error: tool {name!r} failed: {exc}"
        return result_text(result, self.config.max_chars)

    def execute(self, text: str) -> list[Message]:
        """Run every ``<tool_call>`` in ``text``; one tool message per call (errors included), [] if none."""
        messages: list[Message] = []
        for call in parse_tool_calls(text):
            if call.error is not None:
                messages.append(tool(f"Error: {call.error}", name=call.name or None))
            else:
                messages.append(tool(self.call(call.name, call.arguments), name=call.name))
        return messages

    def close(self) -> None:
        """Close the session (stops a stdio server); idempotent."""
        closing, holder = self._closing, self._holder
        self._client = self._closing = self._holder = None
        if closing is not None:
            _LoopThread.get().loop.call_soon_threadsafe(closing.set)
        if holder is not None:
            try:
                holder.result(self.config.timeout_s)
            except Exception:  # noqa: BLE001 - a server that failed while closing is closed all the same
                pass


async def _await(future: asyncio.Future[T]) -> T:
    return await future
