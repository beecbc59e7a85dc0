"""What the gateway does with each field of a ``/chat/completions`` request: honour, override, ignore or refuse.

Training samples from the run's policy: the run's temperature (``rollout.temperature``), no top-p/top-k/
min-p, full-vocab logprobs. So an agent's sampling settings are **overridden** (named on the turn record,
logged once per process). Fields that shape the episode are **honoured**: ``messages``, ``tools``,
``tool_choice`` (``auto``/``none``), ``max_tokens`` (capped by ``rollout.max_new_tokens``), ``stop``,
``logprobs``, ``stream``. Fields that would make the recorded logprobs lie, or need more than one sampled
reply or a constrained sampler (``n > 1``, penalties, ``logit_bias``, ``top_logprobs``, JSON modes, a forced
``tool_choice``, legacy ``functions``) are **refused** with a 400 naming the field and the fix.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from agentrl.errors import GatewayRequestError
from agentrl.gateway.transcript import canonical_messages
from agentrl.messages import Message

log = logging.getLogger(__name__)

OVERRIDDEN = ("temperature", "top_p", "top_k", "min_p", "seed", "reasoning_effort")
IGNORED = ("model", "user", "metadata", "store", "service_tier", "parallel_tool_calls", "prompt_cache_key")
IGNORED += ("safety_identifier", "stream_options", "max_tokens", "max_completion_tokens", "stop", "logprobs")
IGNORED += ("messages", "tools", "tool_choice", "stream", "return_token_ids", "modalities")
# field -> values that change nothing; anything else is refused
REFUSED: dict[str, tuple[Any, ...]] = {
    "n": (None, 1),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "logit_bias": (None, {}),
    "top_logprobs": (None, 0),
    "functions": (None, []),
    "function_call": (None,),
    "prediction": (None,),
    "audio": (None,),
    "response_format": (None, {"type": "text"}),
}
_WHY = {
    "n": "one request is one sampled turn of one episode; send n requests, or raise rollout.group_size",
    "logit_bias": "it would change what the policy samples without changing its recorded logprobs",
    "response_format": "constrained decoding samples from another distribution than the policy's logprobs",
    "top_logprobs": "the gateway returns the sampled tokens' logprobs only (logprobs: true)",
    "functions": "send tools=[{type: function, ...}] instead (the legacy functions API is not served)",
    "function_call": "send tool_choice instead (the legacy functions API is not served)",
}
_warned: set[str] = set()


@dataclass
class CallPlan:
    """One validated request: the messages and tools, and how to sample and answer it."""

    messages: list[Message]
    tools: list[dict[str, Any]]
    parse_tool_calls: bool
    max_tokens: int | None
    stop: tuple[str, ...]
    logprobs: bool
    stream: bool
    include_usage: bool
    token_ids: bool
    notes: list[str] = field(default_factory=list)  # overridden and ignored fields, recorded on the turn

    def same_request(self, other: CallPlan) -> bool:
        """Whether ``other`` asks the same (a client's retry of this request)."""
        return self.messages == other.messages and self.tools == other.tools


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name, neutral in REFUSED.items():
        if name in body and body[name] not in neutral:
            why = _WHY.get(name, "it would make the recorded logprobs differ from the policy's")
            raise GatewayRequestError(
                f"{name}={body[name]!r} is not supported by the agentrl gateway: {why}; leave it unset"
            )
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise GatewayRequestError(
            f"tool_choice {choice!r} is not supported: forcing a tool call needs a constrained sampler, whose tokens "
            "the policy's logprobs do not describe; use 'auto' (or 'none')"
        )


def _tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) and t.get("type") == "function" for t in tools):
        raise GatewayRequestError("tools must be a list of {type: function, function: {name, parameters}} objects")
    return tools


def _max_tokens(body: dict[str, Any]) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GatewayRequestError(f"max_tokens={value!r} must be an integer >= 1")
    return value


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else stop or []
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise GatewayRequestError(f"stop={body.get('stop')!r} must be a string or a list of non-empty strings")
    return tuple(stop)


def _notes(body: dict[str, Any]) -> list[str]:
    notes = [f"{k}={body[k]!r} overridden by the run's sampling" for k in OVERRIDDEN if body.get(k) is not None]
    notes += [f"{k} ignored" for k in sorted(body) if k not in OVERRIDDEN and k not in IGNORED and k not in REFUSED]
    for note in notes:
        key = note.split("=")[0].split(" ")[0]
        if key not in _warned:
            _warned.add(key)
            log.warning("agent gateway: %s (recorded on each turn's info['gateway'])", note)
    return notes


def plan_chat_request(body: Any) -> CallPlan:
    """Validate a ``/chat/completions`` body into a ``CallPlan``; GatewayRequestError (a 400) says what to change."""
    if not isinstance(body, dict):
        raise GatewayRequestError("the request body must be a JSON object")
    _refuse_unsupported(body)
    tools = _tools(body)
    stream_options = body.get("stream_options") or {}
    return CallPlan(
        messages=canonical_messages(body.get("messages")),
        tools=tools,
        parse_tool_calls=bool(tools) and body.get("tool_choice") != "none",
        max_tokens=_max_tokens(body),
        stop=_stop(body),
        logprobs=bool(body.get("logprobs")),
        stream=bool(body.get("stream")),
        include_usage=bool(isinstance(stream_options, dict) and stream_options.get("include_usage")),
        token_ids=bool(body.get("return_token_ids")),
        notes=_notes(body),
    )
