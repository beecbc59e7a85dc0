"""OpenAI request bodies -> token ids and SamplingParams, as SGLang's OpenAI server reads them.

Chat requests render through the model's chat template (``ChatAssembler``: tools passed to the template, or
described in the system prompt when the template has no tool support) with the generation prompt;
completion requests take a string (tokenized, no special tokens added) or a list of token ids. Settings
that would make the returned logprobs lie (n > 1, penalties, logit_bias) are refused, not ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentrl.chat import ChatAssembler
from agentrl.engines.base import SamplingParams
from agentrl.errors import EngineError, TemplateError

DEFAULT_MAX_TOKENS = 256
_REFUSED = {"presence_penalty": 0, "frequency_penalty": 0, "logit_bias": None, "n": 1, "best_of": 1, "echo": False}


@dataclass
class RenderedRequest:
    """What the engine gets for one OpenAI request, and what the response needs to echo."""

    input_ids: list[int]
    sampling: SamplingParams
    logprobs: bool
    tools: list[dict[str, Any]]


def render_chat(body: dict[str, Any], tokenizer: Any, max_context: int) -> RenderedRequest:
    """A /v1/chat/completions body -> the prompt tokens of its messages plus the assistant generation prompt."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise EngineError("messages must be a non-empty list of {role, content} objects")
    tools = body.get("tools") or []
    if body.get("tool_choice") not in (None, "auto", "none"):
        raise EngineError(f"tool_choice {body['tool_choice']!r} is not supported; use 'auto' or 'none'")
    if body.get("tool_choice") == "none":
        tools = []
    try:
        assembler = ChatAssembler(tokenizer, tools=tools)
        ids = assembler.prompt_ids([_plain_message(m) for m in messages])
    except TemplateError as exc:
        raise EngineError(str(exc)) from exc
    if body.get("top_logprobs"):
        raise EngineError("top_logprobs > 0 is not supported by agentrl serve; request logprobs: true only")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    sampling = _sampling(body, max_tokens, assembler.stop_token_ids, len(ids), max_context)
    return RenderedRequest(ids, sampling, bool(body.get("logprobs")), tools)


def render_completion(body: dict[str, Any], tokenizer: Any, max_context: int) -> RenderedRequest:
    """A /v1/completions body -> prompt tokens (a string is tokenized without special tokens)."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        ids = list(prompt)
    else:
        raise EngineError("prompt must be one string or one list of token ids (batches are not supported)")
    if body.get("logprobs") not in (None, 0, 1, True, False):
        raise EngineError("logprobs > 1 (top alternatives) is not supported by agentrl serve; use logprobs: 1")
    eos = tokenizer.eos_token_id
    sampling = _sampling(
        body, body.get("max_tokens") or 16, (eos,) if isinstance(eos, int) else (), len(ids), max_context
    )
    return RenderedRequest(ids, sampling, body.get("logprobs") not in (None, 0, False), [])


def _sampling(
    body: dict[str, Any], max_tokens: Any, stop_ids: tuple[int, ...], prompt_len: int, max_context: int
) -> SamplingParams:
    for name, neutral in _REFUSED.items():
        if body.get(name) not in (None, neutral):
            raise EngineError(f"{name}={body[name]!r} is not supported by agentrl serve; leave it at {neutral!r}")
    stop = body.get("stop")
    stop = (stop,) if isinstance(stop, str) else tuple(stop or ())
    budget = int(max_tokens) if max_tokens is not None else DEFAULT_MAX_TOKENS
    try:
        return SamplingParams(
            max_new_tokens=max(0, min(budget, max_context - prompt_len)),
            temperature=float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0),
            top_p=float(body.get("top_p") or 1.0),
            stop_token_ids=tuple(stop_ids),
            stop=stop,
            seed=body.get("seed"),
        )
    except ValueError as exc:
        raise EngineError(f"invalid sampling settings: {exc}") from exc


def _plain_message(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI message as the chat template takes it (content parts joined, tool calls as the template expects)."""
    out = dict(message)
    content = out.get("content")
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        out["content"] = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    elif content is None:
        out["content"] = ""
    return out
