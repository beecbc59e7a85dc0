"""OpenEnv's session protocol over WebSocket (``/ws``): reset, step, state and MCP JSON-RPC, synchronously.

OpenEnv's HTTP ``/reset`` and ``/step`` build a fresh environment per request, so a multi-turn
episode needs the WebSocket session: one connection is one server-side environment instance.
Messages are ``{"type": "reset"|"step"|"state"|"mcp"|"close", "data": ...}``; answers are
``observation``, ``state``, ``mcp`` or ``error``. This module needs ``websockets``
(``pip install 'agentrl[openenv]'``), not the ``openenv`` package itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentrl.errors import AgentRLError

INSTALL_HINT = "pip install 'agentrl[openenv]'"


class OpenEnvError(AgentRLError, RuntimeError):
    """An OpenEnv server cannot be reached, refused the session, or answered with an error."""


class OpenEnvCapacityError(OpenEnvError):
    """The server holds as many sessions as its max_concurrent_envs allows: a retry cannot help."""


@dataclass(frozen=True)
class OpenEnvResult:
    """One reset/step answer: the observation fields, reward (None when the env gave none), done, metadata."""

    observation: dict[str, Any]
    reward: float | None
    done: bool
    metadata: dict[str, Any]


def ws_url(url: str) -> str:
    """The session endpoint of a server base URL (``http://host:port`` -> ``ws://host:port/ws``)."""
    base = url.rstrip("/")
    if base.startswith("http"):
        base = "ws" + base[len("http") :]
    return base if base.endswith("/ws") else f"{base}/ws"


class OpenEnvSession:
    """One WebSocket session with an OpenEnv server: one environment instance on the server side."""

    def __init__(self, url: str, timeout_s: float = 60.0) -> None:
        try:
            from websockets.sync.client import connect
        except ImportError as exc:
            raise OpenEnvError(f"the OpenEnv adapter needs the websockets package: {INSTALL_HINT}") from exc
        self.url, self.timeout_s = ws_url(url), timeout_s
        self._rpc_id = 0
        try:
            # Entered as a context manager (websockets >= 15 warns otherwise); close() exits it.
            self._ws = connect(self.url, open_timeout=timeout_s, max_size=None, ping_interval=20.0).__enter__()
        except Exception as exc:  # noqa: BLE001 - refused, DNS, handshake: one actionable error
            raise OpenEnvError(
                f"cannot open an OpenEnv session at {self.url}: {type(exc).__name__}: {exc}. Start the env server "
                "(e.g. `uvicorn server.app:app --port 8000`) and pass its base URL as env.kwargs.url"
            ) from exc

    def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            try:
                self._ws.send(json.dumps(message))
            except Exception:  # noqa: BLE001 - closed by the server: its reason may be a frame still to read
                reply = json.loads(self._ws.recv(timeout=1.0))
                if reply.get("type") != "error":
                    raise
            else:
                reply = json.loads(self._ws.recv(timeout=self.timeout_s))
        except TimeoutError as exc:
            raise OpenEnvError(
                f"the OpenEnv server at {self.url} did not answer a {message['type']!r} within {self.timeout_s:g} s; "
                "raise env.kwargs.timeout_s or check the server"
            ) from exc
        except Exception as exc:  # noqa: BLE001 - a closed or broken connection ends the session
            raise OpenEnvError(f"the OpenEnv session at {self.url} broke during {message['type']!r}: {exc}") from exc
        if reply.get("type") == "error":
            data = reply.get("data") or {}
            kind = OpenEnvCapacityError if data.get("code") == "CAPACITY_REACHED" else OpenEnvError
            raise kind(_error_text(self.url, message["type"], data))
        return reply.get("data") or {}

    def reset(self, **kwargs: Any) -> OpenEnvResult:
        """Reset the session's environment (kwargs: seed, episode_id, and what the env's reset accepts)."""
        return _result(self._request({"type": "reset", "data": kwargs}))

    def step(self, action: dict[str, Any]) -> OpenEnvResult:
        """Apply one action (a dict matching the env's action schema)."""
        return _result(self._request({"type": "step", "data": action}))

    def state(self) -> dict[str, Any]:
        """The environment's ``state`` (episode_id, step_count, and env-specific fields)."""
        return self._request({"type": "state"})

    def rpc(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """One MCP JSON-RPC call inside the session (``tools/list``, ``tools/call``); OpenEnvError on an error reply."""
        self._rpc_id += 1
        request = {"jsonrpc": "2.0", "method": method, "params": params or {}, "id": self._rpc_id}
        reply = self._request({"type": "mcp", "data": request})
        if reply.get("error"):
            error = reply["error"]
            raise OpenEnvError(f"MCP {method} failed: {error.get('message', error)}")
        return reply.get("result")

    def close(self) -> None:
        """Close the session (the server drops its environment instance); idempotent."""
        try:
            self._ws.send(json.dumps({"type": "close"}))
        except Exception:  # noqa: BLE001 - already closed is closed
            pass
        self._ws.close()


def _result(data: dict[str, Any]) -> OpenEnvResult:
    reward = data.get("reward")
    return OpenEnvResult(
        observation=dict(data.get("observation") or {}),
        reward=None if reward is None else float(reward),
        done=bool(data.get("done", False)),
        metadata=dict(data.get("metadata") or {}),
    )


def _error_text(url: str, kind: str, data: dict[str, Any]) -> str:
    code, message = data.get("code", "ERROR"), data.get("message", data)
    if code == "CAPACITY_REACHED":
        return (
            f"the OpenEnv server at {url} is full ({data.get('active_sessions')} of {data.get('max_sessions')} "
            "sessions): every episode in flight holds one session for its whole length, so start the server with "
            "max_concurrent_envs at least the episodes in flight (rollout.group_size x rollout.prompts_per_step, "
            "more with over-sampling or partial rollouts; add the eval's episodes when eval runs beside training)"
        )
    if code == "VALIDATION_ERROR":
        return (
            f"the OpenEnv server at {url} rejected the {kind} message ({data.get('errors', message)}); check "
            "env.kwargs.action_field / action_defaults against the env's /schema"
        )
    return f"the OpenEnv server at {url} failed the {kind} message: {code}: {message}"
