"""Stop strings over a whole turn that was cut at a step boundary and resumed.

An engine matches ``rollout.stop`` in the text it generates in one request. A turn cut by a step-boundary abort
and resumed is two requests: a stop string whose first characters ended the first and whose last ones began the
second (``"\\n```\\n"`` split after ``"\\n``"``) is seen by neither, and the resumed turn runs on past it, those
tokens trained as part of the action. So after a resumed request the turn's text is checked again, and the turn is
cut after the token that completes the first stop string found there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from agentrl.engines.base import GenerateResult, VersionSpan


def cut_at_straddling_stop(
    before: list[int], result: GenerateResult, stop: Sequence[str], decode: Callable[[list[int]], str]
) -> GenerateResult:
    """``result`` (the tokens a resumed request added after the turn's ``before``) cut after the token that
    completes a stop string beginning in ``before``'s text and ending in the new tokens' (finish ``stop``);
    ``result`` itself when there is none."""
    if not before or not stop or not result.output_ids:
        return result
    prior = decode(before)
    text = decode(before + result.output_ids)
    found = [
        (at + len(s), s)
        for s in stop
        if s and (at := text.find(s, max(0, len(prior) - len(s) + 1))) != -1 and at < len(prior) < at + len(s)
    ]
    if not found:
        return result
    end, matched = min(found)
    keep = next(k for k in range(1, len(result.output_ids) + 1) if len(decode(before + result.output_ids[:k])) >= end)
    spans = [VersionSpan(s.version, s.start, min(s.end, keep)) for s in result.version_spans if s.start < keep]
    return replace(
        result,
        output_ids=result.output_ids[:keep],
        logprobs=result.logprobs[:keep],
        finish_reason="stop",
        version_spans=spans,
        matched_stop=matched,
    )
