"""OpenEnv-v0: drive an OpenEnv environment server as a MultiTurnEnv (one WebSocket session per env).

The assistant's text becomes the action field ``action_field`` (e.g. ``message``); each
observation is rendered as a user message (``observation_field``, else its JSON); the env's
reward and done flag are the turn's reward and ``terminated``. With ``tools`` set, the server's
MCP tools (``tools/list`` in the session) are the env's tool schemas and ``<tool_call>`` blocks are
sent as OpenEnv ``call_tool`` actions through ``step`` (``tools: step``, the env sees them) or as
MCP ``tools/call`` requests (``tools: rpc``). OpenEnv has no state restore, so a partial episode
is restored by replay (reset with the same seed, re-apply the actions) and verified message by
message; a server that is not deterministic is detected and the episode restarted.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentrl.env import Message, MultiTurnEnv, StepResult, tool, user
from agentrl.errors import PreflightError
from agentrl.tools.mcp import error_message
from agentrl.tools.toolcall import has_tool_call, parse_tool_calls
from envs.interop.openenv_wire import OpenEnvCapacityError, OpenEnvError, OpenEnvResult, OpenEnvSession


class OpenEnvConfig(BaseModel):
    """Constructor kwargs of OpenEnv-v0: where the server is and how text maps to its actions."""

    model_config = ConfigDict(extra="forbid")
    url: str = Field(pattern=r"^(https?|wss?)://", description="Base URL of the OpenEnv server, e.g. http://host:8000.")
    action_field: str = Field("message", description="Action field that receives the assistant's text.")
    action_defaults: dict[str, Any] = Field(default_factory=dict, description="Other fields sent with every action.")
    observation_field: str | None = Field(
        None, description="Observation field shown to the model as text (None: the observation as JSON)."
    )
    tools: Literal["none", "step", "rpc"] = Field(
        "none", description="none; step: tool calls as call_tool actions through step(); rpc: MCP tools/call."
    )
    task_ids: list[str] = Field(default_factory=list, description="Task ids of the run ([]: tasks are seeds).")
    task_field: str = Field("task_id", description="Reset argument that receives the task id.")
    reset_kwargs: dict[str, Any] = Field(default_factory=dict, description="Other arguments of every reset.")
    max_turns: int = Field(8, ge=1, description="Assistant turns before the episode is truncated.")
    replayable: bool = Field(
        True, description="The server env is deterministic given (seed, task, actions); replay is verified anyway."
    )
    success_reward: float | None = Field(
        None,
        description="info['success'] = terminated and reward >= this. None: the env's own bool metadata['success'] "
        "when it sends one, else no episode counts as solved (OpenEnv defines no success; a reward is not one).",
    )
    timeout_s: float = Field(60.0, gt=0, description="Longest wait for one server answer.")


def tool_result_text(payload: Any) -> str:
    """Text of a tool result in any of OpenEnv's shapes (CallToolObservation, MCP CallToolResult, a value)."""
    if not isinstance(payload, dict):
        return payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, default=str)
    error = payload.get("error")
    if error:
        return error_message(str(error.get("message", error) if isinstance(error, dict) else error))
    if "result" in payload and "tool_name" in payload:  # a CallToolObservation
        return tool_result_text(payload["result"])
    content = payload.get("content")
    if isinstance(content, list):
        text = "\n".join(str(part.get("text", f"[{part.get('type')} content]")) for part in content)
        failed = payload.get("is_error", payload.get("isError", False))
        return error_message(text) if failed else text
    return json.dumps(payload, ensure_ascii=False, default=str)


def _info(result: OpenEnvResult) -> dict[str, Any]:
    """Step info: the env's metadata, and its ``max_new_tokens`` (a bound on the next reply) where it gives one."""
    info: dict[str, Any] = {"openenv_metadata": result.metadata}
    if isinstance(result.metadata.get("max_new_tokens"), int):
        info["max_new_tokens"] = result.metadata["max_new_tokens"]
    return info


class OpenEnvEnv(MultiTurnEnv):
    """An OpenEnv environment server, spoken to over its WebSocket session protocol."""

    config_model = OpenEnvConfig

    def __init__(self, **kwargs: Any) -> None:
        self.config = OpenEnvConfig(**kwargs)
        self.max_turns = self.config.max_turns
        self.replayable = self.config.replayable
        self._session: OpenEnvSession | None = None
        self._schemas: list[dict[str, Any]] | None = None
        self.turn = 0

    def _open(self) -> OpenEnvSession:
        if self._session is None:
            self._session = OpenEnvSession(self.config.url, self.config.timeout_s)
        return self._session

    def task_ids(self) -> list[str]:
        """The configured task ids ([] when episodes differ by seed only)."""
        return list(self.config.task_ids)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The server's MCP tools as function schemas (``tools`` set), listed once."""
        if self.config.tools == "none":
            return []
        if self._schemas is None:
            listed = self._open().rpc("tools/list").get("tools", [])
            self._schemas = [
                {
                    "type": "function",
                    "function": {
                        "name": t["name"],
                        "description": t.get("description") or "",
                        "parameters": t.get("input_schema") or t.get("inputSchema") or {"type": "object"},
                    },
                }
                for t in listed
            ]
        return list(self._schemas)

    def preflight(self) -> list[str]:
        """Open a session and reset once: proves the server, the session capacity and the reset arguments."""
        try:
            result = self._open().reset(**self._reset_data(None, {"task_id": (self.config.task_ids or [None])[0]}))
        except OpenEnvError as exc:
            raise PreflightError(str(exc)) from exc
        return [f"OpenEnv server {self.config.url}: reset ok, observation fields {sorted(result.observation)}"]

    def _reset_data(self, seed: int | None, options: dict[str, Any] | None) -> dict[str, Any]:
        data = dict(self.config.reset_kwargs)
        if seed is not None:
            data["seed"] = int(seed)
        task_id = (options or {}).get("task_id")
        if task_id is not None and self.config.task_ids:
            data[self.config.task_field] = task_id
        return data

    def _render(self, result: OpenEnvResult) -> Message:
        field = self.config.observation_field
        if field is not None and field in result.observation:
            value = result.observation[field]
            return user(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str))
        shown = {k: v for k, v in result.observation.items() if k != "metadata"}
        return user(json.dumps(shown, ensure_ascii=False, sort_keys=True, default=str))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Reset the server env in this env's session (reopened if it broke); the observation is the prompt."""
        super().reset(seed=seed)
        try:
            result = self._open().reset(**self._reset_data(seed, options))
        except OpenEnvCapacityError:
            self.close()
            raise  # a full server stays full: the error names the fix
        except OpenEnvError:
            self.close()  # a broken session is replaced once
            result = self._open().reset(**self._reset_data(seed, options))
        self.turn = 0
        info = _info(result)
        if (options or {}).get("task_id") is not None:
            info["task_id"] = options["task_id"]  # type: ignore[index]
        return [self._render(result)], info

    def step(self, action: str) -> StepResult:
        """Send the turn's tool calls (``tools`` set) or its text as one action; the env's reward and done."""
        self.turn += 1
        truncated = self.turn >= self.max_turns
        if self.config.tools != "none" and has_tool_call(action):
            messages, reward, done = self._tool_turn(action)
            solved = done and self.config.success_reward is not None and reward >= self.config.success_reward
            return messages, reward, done, truncated and not done, {"tool_calls": len(messages), "success": solved}
        result = self._open().step({**self.config.action_defaults, self.config.action_field: action})
        reward = result.reward or 0.0
        info = _info(result)
        info["success"] = self._success(result, reward)
        return [self._render(result)], reward, result.done, truncated and not result.done, info

    def _success(self, result: OpenEnvResult, reward: float) -> bool:
        """Solved only by a definition: ``success_reward``, else the env's own ``metadata['success']``.

        Set on every step so an episode cut short (truncated, or ended by the run's token budget) never
        falls back to agentrl's "final reward >= 1" rule, which says nothing about an OpenEnv env.
        """
        if self.config.success_reward is not None:
            return result.done and reward >= self.config.success_reward
        flag = result.metadata.get("success")
        return result.done and flag is True

    def _tool_turn(self, action: str) -> tuple[list[Message], float, bool]:
        messages: list[Message] = []
        reward, done = 0.0, False
        for call in parse_tool_calls(action):
            if call.error is not None:
                messages.append(tool(f"Error: {call.error}", name=call.name or None))
                continue
            if self.config.tools == "step":
                result = self._open().step({"type": "call_tool", "tool_name": call.name, "arguments": call.arguments})
                reward, done = reward + (result.reward or 0.0), done or result.done
                messages.append(tool(tool_result_text(result.observation), name=call.name))
            else:
                try:
                    payload = self._open().rpc("tools/call", {"name": call.name, "arguments": call.arguments})
                except OpenEnvError as exc:  # the server's JSON-RPC error (unknown tool, bad arguments)
                    payload = {"error": str(exc)}
                messages.append(tool(tool_result_text(payload), name=call.name))
        return messages, reward, done

    def close(self) -> None:
        """Close the session (the server frees its environment instance)."""
        if self._session is not None:
            self._session.close()
            self._session = None
