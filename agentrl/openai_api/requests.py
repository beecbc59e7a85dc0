"""OpenAI ``/chat/completions`` request fields as agentrl reads them: one reading for ``agentrl serve`` and the gateway.

Messages are canonicalised (text content parts joined, ``developer`` read as ``system``, tool-call arguments
as JSON strings, unknown keys dropped); a non-text content part is refused rather than silently dropped, so
the model never answers a prompt other than the one the client sent. ``tools``, ``tool_choice``, ``stop`` and
``max_tokens`` are checked here too. Fields that would make the returned logprobs lie (penalties,
``logit_bias``, constrained decoding), need more than one sampled reply (``n``, ``best_of``) or belong to a
legacy API are refused by name. Every problem is an ``OpenAIRequestError`` (answered with HTTP 400) naming the
field, its value and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentrl.chat.messages import Message
from agentrl.errors import OpenAIRequestError

ROLES = ("system", "user", "assistant", "tool")
# field -> values that change nothing; anything else is refused
REFUSED: dict[str, tuple[Any, ...]] = {
    "n": (None, 1),
    "best_of": (None, 1),
    "echo": (None, False),
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
WHY_REFUSED = {
    "n": "one request samples one reply; send n requests",
    "best_of": "one request samples one reply; send several requests",
    "logit_bias": "it would change what the policy samples without changing its recorded logprobs",
    "response_format": "constrained decoding samples from another distribution than the policy's logprobs",
    "top_logprobs": "only the sampled tokens' logprobs are returned (logprobs: true)",
    "functions": "send tools=[{type: function, ...}] instead (the legacy functions API is not served)",
    "function_call": "send tool_choice instead (the legacy functions API is not served)",
}


def refuse_unsupported(body: Mapping[str, Any], server: str, hints: Mapping[str, str] | None = None) -> None:
    """Raise for the first field in ``REFUSED`` set to a value that changes something, or a forced tool choice.

    ``server`` names who refuses (``agentrl serve``, ``the agentrl gateway``); ``hints`` replace a field's reason.
    """
    reasons = {**WHY_REFUSED, **(hints or {})}
    for name, neutral in REFUSED.items():
        if name in body and body[name] not in neutral:
            why = reasons.get(name, "it would make the returned logprobs differ from the policy's")
            raise OpenAIRequestError(f"{name}={body[name]!r} is not supported by {server}: {why}; leave it unset")
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise OpenAIRequestError(
            f"tool_choice {choice!r} is not supported: forcing a tool call needs a constrained sampler, whose tokens "
            "the policy's logprobs do not describe; use 'auto' (or 'none')"
        )


def tool_list(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request's ``tools`` (all of ``type: function``); an empty list when there are none."""
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) and t.get("type") == "function" for t in tools):
        raise OpenAIRequestError("tools must be a list of {type: function, function: {name, parameters}} objects")
    return tools


def max_tokens(body: Mapping[str, Any]) -> int | None:
    """``max_completion_tokens`` (or the older ``max_tokens``); None when unset."""
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OpenAIRequestError(f"max_tokens={value!r} must be an integer >= 1")
    return value


def stop_strings(body: Mapping[str, Any]) -> tuple[str, ...]:
    """``stop`` as a tuple of non-empty strings."""
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else stop or []
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise OpenAIRequestError(f"stop={body.get('stop')!r} must be a string or a list of non-empty strings")
    return tuple(stop)


def _content(value: Any, index: int) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        texts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type", "text") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise OpenAIRequestError(
                    f"message {index} has a {kind!r} content part; only text-only chats are served, send text parts"
                )
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise OpenAIRequestError(f"message {index} has content of type {type(value).__name__}; send a string")


def _tool_calls(value: Any, index: int) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise OpenAIRequestError(f"message {index} has tool_calls that are not a list")
    calls = []
    for call in value:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise OpenAIRequestError(f"message {index} has a tool call without function.name: {str(call)[:80]}")
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append(
            {"id": call.get("id"), "type": "function", "function": {"name": function["name"], "arguments": arguments}}
        )
    return calls


def canonical_message(raw: Any, index: int) -> Message:
    """One request message in the form agentrl renders, compares and records (unknown keys dropped)."""
    if not isinstance(raw, dict):
        raise OpenAIRequestError(f"message {index} is a {type(raw).__name__}, not a {{role, content}} object")
    role = "system" if raw.get("role") == "developer" else raw.get("role")
    if role not in ROLES:
        raise OpenAIRequestError(f"message {index} has role {raw.get('role')!r}; use one of {', '.join(ROLES)}")
    message: Message = {"role": role, "content": _content(raw.get("content"), index)}
    if role == "assistant" and raw.get("tool_calls"):
        message["tool_calls"] = _tool_calls(raw["tool_calls"], index)
    for key in ("name", "tool_call_id"):
        if isinstance(raw.get(key), str):
            message[key] = raw[key]
    return message


def canonical_messages(raw: Any) -> list[Message]:
    """The request's ``messages`` canonicalised; the error names the first bad one."""
    if not isinstance(raw, list) or not raw:
        raise OpenAIRequestError("messages must be a non-empty list of {role, content} objects")
    return [canonical_message(m, i) for i, m in enumerate(raw)]
