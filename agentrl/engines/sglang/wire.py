"""SGLang's native /generate JSON shapes (docs/engines.md#sglangs-generate-api), both directions.

The client (``sglang.http``) builds requests and parses replies; ``agentrl serve`` parses requests and
builds replies, so both sides speak exactly the same subset. Weight versions are strings on the wire
(``"default"`` means 0) and ints in agentrl.
"""

from __future__ import annotations

from typing import Any

from agentrl.engines.base import GenerateResult, SamplingParams, VersionSpan
from agentrl.errors import EngineError

QUEUED_ABORT_MESSAGES = ("Abort in waiting queue", "Abort before prefill")  # 0.5.x, <= 0.4.10
# sampling fields agentrl serve accepts only at their neutral value: anything else changes logprobs
_NEUTRAL_FIELDS: dict[str, object] = {
    "min_p": 0.0,
    "min_new_tokens": 0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "n": 1,
    "json_schema": None,
    "regex": None,
    "ebnf": None,
    "structural_tag": None,
    "logit_bias": None,
    "stop_regex": None,
}
_TEXT_ONLY_FIELDS = ("skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim", "stream_interval")


def sampling_to_json(sampling: SamplingParams) -> dict[str, Any]:
    """SamplingParams -> SGLang ``sampling_params``."""
    body: dict[str, Any] = {
        "max_new_tokens": sampling.max_new_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "ignore_eos": sampling.ignore_eos,
    }
    if sampling.stop_token_ids:
        body["stop_token_ids"] = list(sampling.stop_token_ids)
    if sampling.stop:
        body["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        body["sampling_seed"] = sampling.seed
    return body


def sampling_from_json(body: dict[str, Any] | None) -> SamplingParams:
    """SGLang ``sampling_params`` -> SamplingParams; refuses fields that would change logprobs."""
    body = dict(body or {})
    for name, neutral in _NEUTRAL_FIELDS.items():
        value = body.pop(name, neutral)
        if value != neutral and value not in (None, {}, []):
            raise EngineError(
                f"sampling_params.{name}={value!r} is not supported by agentrl serve (it changes logprobs); leave it "
                f"at {neutral!r}"
            )
    for name in _TEXT_ONLY_FIELDS:
        body.pop(name, None)
    stop = body.pop("stop", None)
    stop = (stop,) if isinstance(stop, str) else tuple(stop or ())
    seed = body.pop("sampling_seed", None)
    allowed = {"max_new_tokens", "temperature", "top_p", "top_k", "stop_token_ids", "ignore_eos"}
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise EngineError(
            f"unknown sampling_params field(s) {unknown}; supported: {sorted(allowed | {'stop', 'sampling_seed'})}"
        )
    if body.get("stop_token_ids") is None:
        body.pop("stop_token_ids", None)
    try:
        return SamplingParams(stop=stop, seed=seed, **body)
    except ValueError as exc:
        raise EngineError(f"invalid sampling_params: {exc}") from exc


def version_to_wire(version: int) -> str:
    """agentrl's int version -> SGLang's string ``weight_version``."""
    return str(version)


def version_from_wire(value: object) -> int:
    """SGLang's ``weight_version`` string -> int (``"default"``/missing -> 0)."""
    if value is None or value == "default":
        return 0
    try:
        return int(str(value))
    except ValueError as exc:
        raise EngineError(
            f"server weight_version {value!r} is not an integer; launch SGLang with --weight-version 0 (agentrl sets "
            "versions to the training step)"
        ) from exc


def finish_reason_json(result: GenerateResult) -> dict[str, Any]:
    """The ``meta_info.finish_reason`` object of a result."""
    if result.finish_reason == "stop":
        return {"type": "stop", "matched": result.matched_stop}
    if result.finish_reason == "length":
        return {"type": "length", "length": len(result.output_ids)}
    return {
        "type": "abort",
        "message": str(result.extra.get("message", "Abort request")),
        "status_code": None,
        "err_type": None,
    }


def reply_json(result: GenerateResult, *, return_logprob: bool, text: str, latency_s: float) -> dict[str, Any]:
    """Build SGLang's /generate reply object for one finished request."""
    meta: dict[str, Any] = {
        "id": result.request_id,
        "finish_reason": finish_reason_json(result),
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": len(result.output_ids),
        "cached_tokens": result.cached_tokens,
        "weight_version": version_to_wire(result.version_spans[-1].version),
        "weight_versions": [
            {"version": version_to_wire(s.version), "start": s.start, "end": s.end}
            for s in result.version_spans
            if s.end > s.start
        ],
        "e2e_latency": latency_s,
    }
    if result.finish_reason == "abort" and result.extra.get("message") in QUEUED_ABORT_MESSAGES:
        del meta["prompt_tokens"]  # SGLang's queued-abort reply has none (clients must not rely on it)
    if return_logprob:
        meta["output_token_logprobs"] = [[lp, tok, None] for lp, tok in zip(result.logprobs, result.output_ids)]
        meta["output_token_logprobs_length"] = len(result.output_ids)
        meta["input_token_logprobs"] = []
    return {"text": text, "output_ids": list(result.output_ids), "meta_info": meta}


def parse_reply(body: dict[str, Any], *, request_id: str, prompt_len: int, source: str) -> GenerateResult:
    """Parse one SGLang /generate reply into a GenerateResult, checking logprob ids against output_ids."""
    meta = body.get("meta_info")
    if not isinstance(meta, dict):
        raise EngineError(f"{source}: /generate reply has no meta_info object: {str(body)[:200]}")
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type")
    if kind not in ("stop", "length", "abort"):
        raise EngineError(f"{source}: unknown finish_reason {finish!r} for request {request_id}")
    server_version = version_from_wire(meta.get("weight_version"))
    message = finish.get("message") if kind == "abort" else None
    if kind == "abort" and (message in QUEUED_ABORT_MESSAGES or "output_token_logprobs" not in meta):
        output_ids, logprobs = [], []  # a queued abort (or no logprob key) means 0 new tokens
    else:
        output_ids, logprobs = _tokens_and_logprobs(body, meta, request_id, source)
    matched = finish.get("matched") if kind == "stop" else None
    return GenerateResult(
        request_id=str(meta.get("id", request_id)),
        output_ids=output_ids,
        logprobs=logprobs,
        finish_reason=kind,
        version_spans=_spans(meta, len(output_ids), server_version),
        prompt_tokens=int(meta.get("prompt_tokens") or prompt_len),
        cached_tokens=int(meta.get("cached_tokens") or 0),
        matched_stop=matched,
        extra={"message": message} if message else {},
    )


def _tokens_and_logprobs(
    body: dict[str, Any], meta: dict[str, Any], request_id: str, source: str
) -> tuple[list[int], list[float]]:
    triples = meta.get("output_token_logprobs")
    if triples is None:
        raise EngineError(f"{source}: reply for {request_id} has no output_token_logprobs; send return_logprob=true")
    output_ids = [int(t) for t in body.get("output_ids", [])]
    ids = [int(t[1]) for t in triples]
    if ids != output_ids:
        raise EngineError(
            f"{source}: output_token_logprobs ids differ from output_ids for request {request_id} ({len(ids)} vs "
            f"{len(output_ids)} tokens); the server must return every sampled id (is a proxy rewriting replies?)"
        )
    logprobs = [float(t[0]) for t in triples]
    return output_ids, logprobs


def _spans(meta: dict[str, Any], n_tokens: int, fallback: int) -> list[VersionSpan]:
    """Use ``weight_versions`` spans (SGLang 0.5.23+) when present, else one span at weight_version."""
    raw = meta.get("weight_versions")
    if raw and n_tokens:
        spans = [VersionSpan(version_from_wire(s["version"]), int(s["start"]), int(s["end"])) for s in raw]
        if (
            spans[0].start == 0
            and spans[-1].end == n_tokens
            and all(a.end == b.start for a, b in zip(spans, spans[1:]))
        ):
            return spans
        raise EngineError(f"weight_versions spans {raw} do not cover the {n_tokens} output tokens")
    return [VersionSpan(fallback, 0, n_tokens)]
