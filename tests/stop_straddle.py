"""A stop string cut in two by a step-boundary abort, on a real engine (embedded, SGLang, vLLM): the engine alone
misses it in the resumed request, and the rollout's whole-turn check cuts the turn where it completes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrl.engines.base import SamplingParams
from agentrl.rollout.stop_strings import cut_at_straddling_stop

TOKENS = 32


def _split(out: list[int], decode: Callable[[list[int]], str]) -> tuple[int, str]:
    """A cut after token ``j`` and a 4-character stop string made of the 2 characters before it and the 2 after,
    whose first occurrence in the greedy text is there."""
    text = decode(out)
    for j in range(2, len(out) - 4):
        head = decode(out[:j])
        at = len(head) - 2
        stop = text[at : at + 4]
        if text.startswith(head) and at >= 0 and len(stop) == 4 and stop.strip() and text.find(stop) == at:
            return j, stop
    raise AssertionError(f"no token boundary to split a stop string at in {text!r}")


async def straddled_stop(engine: Any, prompt: list[int], decode: Callable[[list[int]], str]) -> dict[str, Any]:
    """Greedy-generate, cut after token ``j`` (as a step-boundary abort does), resume with ``stop``; what the
    engine returned for the resumed request and what the whole-turn check made of it."""
    greedy = SamplingParams(max_new_tokens=TOKENS, temperature=0.0, ignore_eos=True)
    out = (await engine.generate(prompt, greedy)).output_ids
    j, stop = _split(out, decode)
    before = SamplingParams(max_new_tokens=j, temperature=0.0, ignore_eos=True)
    partial = (await engine.generate(prompt, before)).output_ids
    rest = SamplingParams(max_new_tokens=TOKENS - j, temperature=0.0, ignore_eos=True, stop=(stop,))
    resumed = await engine.generate(prompt + partial, rest)
    cut = cut_at_straddling_stop(partial, resumed, (stop,), decode)
    return {"stop": stop, "partial": partial, "resumed": resumed, "cut": cut, "greedy": out, "j": j}


def check_straddled_stop(found: dict[str, Any], decode: Callable[[list[int]], str]) -> None:
    """The turn (the partial tokens, then the resumed request's after the whole-turn check) ends with the token that
    completes the stop string, whether the engine saw the string across the cut itself (the embedded engine
    matches over the prompt's tail) or ran past it (the HTTP servers match only their own output)."""
    stop, partial, resumed, cut = found["stop"], found["partial"], found["resumed"], found["cut"]
    assert partial == found["greedy"][: found["j"]]
    assert cut.finish_reason == "stop" and cut.matched_stop in (stop, None)
    assert 0 < len(cut.output_ids) <= len(resumed.output_ids)
    assert cut.output_ids == resumed.output_ids[: len(cut.output_ids)]
    assert len(cut.logprobs) == len(cut.output_ids) == sum(s.end - s.start for s in cut.version_spans)
    assert stop in decode(partial + cut.output_ids) and stop not in decode(partial + cut.output_ids[:-1])
