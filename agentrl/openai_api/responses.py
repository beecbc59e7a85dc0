"""GenerateResult -> OpenAI response objects, shaped as SGLang's OpenAI server returns them.

Chat replies parse Hermes ``<tool_call>`` blocks (``agentrl.tools.toolcall``) into ``message.tool_calls`` with
``finish_reason: "tool_calls"`` when the request offered tools; ``logprobs.content`` lists every sampled
token (its text, logprob, UTF-8 bytes). SGLang's extension ``return_token_ids`` adds the raw ids.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from agentrl.engines.base import GenerateResult
from agentrl.tools.toolcall import CLOSE_TAG, OPEN_TAG, parse_tool_calls

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


def token_logprobs(result: GenerateResult, tokenizer: Any) -> list[dict[str, Any]]:
    """One entry per sampled token: its decoded text, logprob and bytes (chat ``logprobs.content``)."""
    out = []
    for tok, lp in zip(result.output_ids, result.logprobs):
        text = tokenizer.decode([tok], skip_special_tokens=False)
        out.append({"token": text, "logprob": lp, "bytes": list(text.encode("utf-8")), "top_logprobs": []})
    return out


def _random_call_id(index: int) -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def assistant_message(
    text: str, finish: str, *, tools: bool, call_id: Callable[[int], str] = _random_call_id
) -> tuple[dict[str, Any], str]:
    """The reply's ``message`` and finish reason: Hermes blocks become ``tool_calls`` when tools were offered."""
    message: dict[str, Any] = {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None}
    if tools and OPEN_TAG in text:
        calls = [c for c in parse_tool_calls(text) if c.ok]
        if calls:
            message["content"] = text[: text.index(OPEN_TAG)].strip() or None
            message["tool_calls"] = [
                {
                    "id": call_id(i),
                    "index": i,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
                }
                for i, c in enumerate(calls)
            ]
            finish = "tool_calls" if finish == "stop" or text.rstrip().endswith(CLOSE_TAG) else finish
    return message, finish


def chat_response(
    result: GenerateResult,
    tokenizer: Any,
    model: str,
    *,
    logprobs: bool,
    tools: bool,
    token_ids: bool,
    text: str | None = None,
    call_id: Callable[[int], str] = _random_call_id,
) -> dict[str, Any]:
    """The /v1/chat/completions reply for one finished generation.

    ``text`` replaces the decoded output (the agent gateway cuts a matched stop string, as OpenAI does);
    ``call_id`` names the i-th tool call (the gateway's ids are deterministic, so a replayed agent sees the same).
    """
    if text is None:
        text = tokenizer.decode(result.output_ids, skip_special_tokens=True)
    message, finish = assistant_message(text, _FINISH[result.finish_reason], tools=tools, call_id=call_id)
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "logprobs": {"content": token_logprobs(result, tokenizer)} if logprobs else None,
        "finish_reason": finish,
        "matched_stop": result.matched_stop,
    }
    if token_ids:
        choice["token_ids"] = list(result.output_ids)
    return _envelope("chat.completion", model, choice, result)


def completion_response(result: GenerateResult, tokenizer: Any, model: str, *, logprobs: bool) -> dict[str, Any]:
    """The /v1/completions reply for one finished generation."""
    text = tokenizer.decode(result.output_ids, skip_special_tokens=True)
    choice: dict[str, Any] = {
        "index": 0,
        "text": text,
        "logprobs": None,
        "finish_reason": _FINISH[result.finish_reason],
        "matched_stop": result.matched_stop,
    }
    if logprobs:
        entries = token_logprobs(result, tokenizer)
        offsets, at = [], 0
        for entry in entries:
            offsets.append(at)
            at += len(entry["token"])
        choice["logprobs"] = {
            "tokens": [e["token"] for e in entries],
            "token_logprobs": [e["logprob"] for e in entries],
            "text_offset": offsets,
            "top_logprobs": None,
        }
    return _envelope("text_completion", model, choice, result)


def models_response(model: str) -> dict[str, Any]:
    """The /v1/models reply: the one served model."""
    return {
        "object": "list",
        "data": [{"id": model, "object": "model", "created": int(time.time()), "owned_by": "agentrl", "root": model}],
    }


def _envelope(kind: str, model: str, choice: dict[str, Any], result: GenerateResult) -> dict[str, Any]:
    completion = len(result.output_ids)
    return {
        "id": result.request_id,
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": result.prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": result.cached_tokens},
        },
        "metadata": {"weight_version": str(result.version_spans[-1].version)},
    }


def error_body(message: str, status: int) -> dict[str, Any]:
    """OpenAI's error shape (the openai client raises it as BadRequestError, NotFoundError, ...)."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"object": "error", "error": {"message": message, "type": kind, "code": status}}
