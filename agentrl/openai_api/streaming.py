"""A finished OpenAI reply as the server-sent events a ``stream: true`` client reads (``agentrl serve`` and the
agent gateway).

The engines return finished requests only, so a stream is the whole reply in the chunk shapes OpenAI's API
sends (``chat.completion.chunk``: the role and content, then the tool calls, then the finish reason;
``text_completion`` chunks for /v1/completions), ending with ``data: [DONE]``; ``stream_options.include_usage``
adds the usage chunk. Clients written for OpenAI's streaming read it unchanged.
"""

from __future__ import annotations

import json
from typing import Any


def _event(chunk: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode()


DONE = b"data: [DONE]\n\n"


def include_usage(body: dict[str, Any]) -> bool:
    """Whether a request's ``stream_options`` asks for the usage chunk."""
    options = body.get("stream_options") or {}
    return bool(isinstance(options, dict) and options.get("include_usage"))


def chat_stream_events(reply: dict[str, Any], usage: bool) -> list[bytes]:
    """A finished ``chat.completion`` as ``chat.completion.chunk`` events, ending with ``[DONE]``."""
    choice = reply["choices"][0]
    message = choice["message"]
    head = {"id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"], "model": reply["model"]}

    def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": message["content"] or ""}, logprobs=choice["logprobs"])]
    if message["tool_calls"]:
        chunks.append(chunk({"tool_calls": message["tool_calls"]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if usage:
        chunks.append({**head, "choices": [], "usage": reply["usage"]})
    return [*map(_event, chunks), DONE]


def completion_stream_events(reply: dict[str, Any], usage: bool) -> list[bytes]:
    """A finished ``text_completion`` as its streamed chunks (the text, then the finish reason), then ``[DONE]``."""
    choice = reply["choices"][0]
    head = {"id": reply["id"], "object": "text_completion", "created": reply["created"], "model": reply["model"]}

    def chunk(text: str, finish: str | None, logprobs: Any = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}]}

    chunks = [chunk(choice["text"], None, choice.get("logprobs")), chunk("", choice["finish_reason"])]
    if usage:
        chunks.append({**head, "choices": [], "usage": reply["usage"]})
    return [*map(_event, chunks), DONE]
