"""The gateway's answers: a sampled turn -> an OpenAI chat completion (or its server-sent-event stream).

Built with ``agentrl.openai_api.responses`` (the shapes ``agentrl serve`` returns), with two differences
an agent relies on for its history: a matched stop string is cut from the text (OpenAI's semantics; the
ledger keeps the sampled tokens), and tool-call ids are ``call_<turn>_<i>``, so an agent replayed after a
restart receives byte-identical replies. ``stream: true`` is answered as one buffered stream once the
whole turn is sampled: the protocol SDKs expect, without incremental tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentrl.engines.base import FinishReason, GenerateResult, VersionSpan
from agentrl.gateway.protocol import CallPlan
from agentrl.openai_api.responses import chat_response


@dataclass
class SampledTurn:
    """The tokens of one finished assistant turn, as the ledger recorded them (for usage and logprobs)."""

    ids: list[int]
    logprobs: list[float]
    versions: list[int]
    prompt_tokens: int
    finish_reason: FinishReason


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to the first matched stop string (OpenAI excludes it from the reply)."""
    cuts = [text.find(s) for s in stop if s in text]
    return text[: min(cuts)] if cuts else text


def _spans(versions: list[int]) -> list[VersionSpan]:
    spans: list[VersionSpan] = []
    for i, version in enumerate(versions):
        if spans and spans[-1].version == version:
            spans[-1] = VersionSpan(version, spans[-1].start, i + 1)
        else:
            spans.append(VersionSpan(version, i, i + 1))
    return spans or [VersionSpan(-1, 0, 0)]


def completion(
    text: str, plan: CallPlan, turn_index: int, model: str, sampled: SampledTurn | None, tokenizer: Any
) -> dict[str, Any]:
    """The chat completion answering ``plan`` with the turn's text (``sampled`` None: no tokens known, a replay)."""
    if sampled is None:
        result = GenerateResult(f"replay-{turn_index}", [], [], "stop", _spans([]), prompt_tokens=0)
    else:
        result = GenerateResult(
            f"chatcmpl-{turn_index}",
            sampled.ids,
            sampled.logprobs,
            sampled.finish_reason,
            _spans(sampled.versions),
            prompt_tokens=sampled.prompt_tokens,
        )
    return chat_response(
        result,
        tokenizer,
        model,
        logprobs=plan.logprobs and sampled is not None,
        tools=plan.parse_tool_calls,
        token_ids=plan.token_ids and sampled is not None,
        text=cut_at_stop(text, plan.stop),
        call_id=lambda i: f"call_{turn_index}_{i}",
    )
