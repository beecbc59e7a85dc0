"""OpenAI request bodies -> token ids and SamplingParams, as SGLang's OpenAI server reads them.

Chat requests render through the model's chat template (``ChatAssembler``: tools passed to the template, or
described in the system prompt when the template has no tool support) with the generation prompt;
completion requests take a string (tokenized, no special tokens added) or a list of token ids. The request
fields are read by ``agentrl.openai_api.requests`` (as the agent gateway reads them): settings that would make
the returned logprobs lie (n > 1, penalties, logit_bias, constrained decoding) are refused, not ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentrl.chat import ChatAssembler
from agentrl.engines.base import SamplingParams
from agentrl.errors import EngineError, TemplateError
from agentrl.openai_api.requests import canonical_messages, max_tokens, refuse_unsupported, stop_strings, tool_list

DEFAULT_MAX_TOKENS = 256
SERVER = "agentrl serve"


@dataclass
class RenderedRequest:
    """What the engine gets for one OpenAI request, and what the response needs to echo."""

    input_ids: list[int]
    sampling: SamplingParams
    logprobs: bool
    tools: list[dict[str, Any]]


def render_chat(body: dict[str, Any], tokenizer: Any, max_context: int) -> RenderedRequest:
    """A /v1/chat/completions body -> the prompt tokens of its messages plus the assistant generation prompt."""
    messages = canonical_messages(body.get("messages"))
    refuse_unsupported(body, SERVER)
    tools = [] if body.get("tool_choice") == "none" else tool_list(body)
    try:
        assembler = ChatAssembler(tokenizer, tools=tools)
        ids = assembler.prompt_ids(messages)
    except TemplateError as exc:
        raise EngineError(str(exc)) from exc
    sampling = _sampling(body, max_tokens(body), assembler.stop_token_ids, len(ids), max_context)
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
    refuse_unsupported(body, SERVER)
    if body.get("logprobs") not in (None, 0, 1, True, False):
        raise EngineError("logprobs > 1 (top alternatives) is not supported by agentrl serve; use logprobs: 1")
    eos = tokenizer.eos_token_id
    sampling = _sampling(
        body, body.get("max_tokens") or 16, (eos,) if isinstance(eos, int) else (), len(ids), max_context
    )
    return RenderedRequest(ids, sampling, body.get("logprobs") not in (None, 0, False), [])


def _sampling(
    body: dict[str, Any], requested: Any, stop_ids: tuple[int, ...], prompt_len: int, max_context: int
) -> SamplingParams:
    stop = stop_strings(body)
    budget = int(requested) if requested is not None else DEFAULT_MAX_TOKENS
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
