"""What the gateway does with each field of a ``/chat/completions`` request: honour, override, ignore or refuse.

Training samples from the run's policy: the run's temperature (``rollout.temperature``), no top-p/top-k/
min-p, full-vocab logprobs. So an agent's sampling settings are **overridden** (named on the turn record,
logged once per process). Fields that shape the episode are **honoured**: ``messages``, ``tools``,
``tool_choice`` (``auto``/``none``), ``max_tokens`` (capped by ``rollout.max_new_tokens``), ``stop``,
``logprobs``, ``stream``. Fields that would make the recorded logprobs lie, or need more than one sampled
reply or a constrained sampler (``n > 1``, penalties, ``logit_bias``, ``top_logprobs``, JSON modes, a forced
``tool_choice``, legacy ``functions``) are **refused** with a 400 naming the field and the fix. The fields are
read by ``agentrl.openai_api.requests``, the same reading as ``agentrl serve``'s OpenAI endpoints.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.messages import Message
from agentrl.errors import GatewayRequestError
from agentrl.openai_api.requests import (
    REFUSED,
    canonical_messages,
    max_tokens,
    refuse_unsupported,
    stop_strings,
    tool_list,
)

log = logging.getLogger(__name__)

OVERRIDDEN = ("temperature", "top_p", "top_k", "min_p", "seed", "reasoning_effort")
IGNORED = ("model", "user", "metadata", "store", "service_tier", "parallel_tool_calls", "prompt_cache_key")
IGNORED += ("safety_identifier", "stream_options", "max_tokens", "max_completion_tokens", "stop", "logprobs")
IGNORED += ("messages", "tools", "tool_choice", "stream", "return_token_ids", "modalities")
# the gateway's reason for a refused field, where it differs from agentrl.openai_api.requests'
HINTS = {"n": "one request is one sampled turn of one episode; send n requests, or raise rollout.group_size"}
SERVER = "the agentrl gateway"
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
    """Validate a ``/chat/completions`` body into a ``CallPlan``; an OpenAIRequestError (a 400) says what to change."""
    if not isinstance(body, dict):
        raise GatewayRequestError("the request body must be a JSON object")
    refuse_unsupported(body, SERVER, HINTS)
    tools = tool_list(body)
    stream_options = body.get("stream_options") or {}
    return CallPlan(
        messages=canonical_messages(body.get("messages")),
        tools=tools,
        parse_tool_calls=bool(tools) and body.get("tool_choice") != "none",
        max_tokens=max_tokens(body),
        stop=stop_strings(body),
        logprobs=bool(body.get("logprobs")),
        stream=bool(body.get("stream")),
        include_usage=bool(isinstance(stream_options, dict) and stream_options.get("include_usage")),
        token_ids=bool(body.get("return_token_ids")),
        notes=_notes(body),
    )
