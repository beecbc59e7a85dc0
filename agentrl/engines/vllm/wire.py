"""vLLM's OpenAI-compatible wire format <-> agentrl's types: the /v1/completions body of a token-in
request and the parsing of its reply into a ``GenerateResult``.

Requests send ``prompt`` as token ids with ``return_token_ids`` and ``logprobs: 0`` (the sampled token's
logprob only) and ``return_tokens_as_token_ids`` (each logprob entry names its id as ``token_id:N``),
so the ids in the logprob list are checked against ``token_ids`` like SGLang's triples.
"""

from __future__ import annotations

from typing import Any

from agentrl.engines.base import GenerateResult, SamplingParams, VersionSpan
from agentrl.errors import EngineError

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


def completion_body(model: str, input_ids: list[int], sampling: SamplingParams, request_id: str) -> dict[str, Any]:
    """The /v1/completions body of one token-in/token-out request."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(input_ids),
        "max_tokens": sampling.max_new_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "ignore_eos": sampling.ignore_eos,
        "logprobs": 0,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
        "include_stop_str_in_output": True,
        "request_id": request_id,
        "stream": False,
    }
    if sampling.stop_token_ids:
        body["stop_token_ids"] = list(sampling.stop_token_ids)
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    return body


def parse_completion(reply: Any, *, request_id: str, prompt_len: int, version: int, source: str) -> GenerateResult:
    """One /v1/completions reply -> GenerateResult; every token is attributed to ``version`` (the client
    knows it: weight updates pause the server between requests, see ``vllm.http``)."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not choices:
        raise EngineError(f"{source}: /v1/completions reply has no choices: {str(reply)[:300]}")
    choice = choices[0]
    finish = _FINISH.get(str(choice.get("finish_reason")))
    if finish is None:
        raise EngineError(f"{source}: unknown finish_reason {choice.get('finish_reason')!r} for {request_id}")
    output_ids = [int(t) for t in choice.get("token_ids") or []]
    logprobs = _logprobs(choice, output_ids, request_id, source)
    usage = reply.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    stop_reason = choice.get("stop_reason")
    return GenerateResult(
        request_id=request_id,
        output_ids=output_ids,
        logprobs=logprobs,
        finish_reason=finish,  # type: ignore[arg-type]
        version_spans=[VersionSpan(version, 0, len(output_ids))],
        prompt_tokens=int(usage.get("prompt_tokens") or prompt_len),
        cached_tokens=int(details.get("cached_tokens") or 0),
        matched_stop=stop_reason if finish == "stop" else None,
    )


def _logprobs(choice: dict[str, Any], output_ids: list[int], request_id: str, source: str) -> list[float]:
    block = choice.get("logprobs")
    if not output_ids:
        return []
    if not isinstance(block, dict) or block.get("token_logprobs") is None:
        raise EngineError(f"{source}: reply for {request_id} has no logprobs; the request must send logprobs: 0")
    tokens = block.get("tokens") or []
    ids = [_token_id(t, source) for t in tokens]
    if ids != output_ids:
        raise EngineError(
            f"{source}: logprob token ids differ from token_ids for request {request_id} ({len(ids)} vs "
            f"{len(output_ids)} tokens); the server must return every sampled id (is a proxy rewriting replies?)"
        )
    return [float(lp) for lp in block["token_logprobs"]]


def _token_id(token: object, source: str) -> int:
    """``"token_id:123"`` (return_tokens_as_token_ids) -> 123."""
    text = str(token)
    if not text.startswith("token_id:"):
        raise EngineError(
            f"{source}: logprob token {text!r} is not 'token_id:N'; the server ignored return_tokens_as_token_ids "
            "(vLLM >= 0.6 honours it)"
        )
    return int(text.removeprefix("token_id:"))
