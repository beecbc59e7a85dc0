"""A request inside the embedded engine (inputs, where its result goes, what it has produced so far),
and how a result or an error reaches the caller's event loop from the scheduler thread."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import torch

from agentrl.engines.base import FinishReason, GenerateResult, SamplingParams, VersionSpan
from agentrl.engines.embedded.prefix_index import block_hashes
from agentrl.engines.embedded.sampling import RowSampling


@dataclass(eq=False)  # identity semantics: requests are looked up in queues
class Request:
    """One generation in the engine: its inputs, where to deliver it, and what it has produced."""

    rid: str
    input_ids: list[int]
    sampling: SamplingParams
    max_new: int
    stop_ids: frozenset[int]
    future: asyncio.Future[GenerateResult]
    loop: asyncio.AbstractEventLoop
    generator: torch.Generator | None = None
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    cached_tokens: int = 0  # prompt tokens whose keys/values were copied, not computed
    aborted: bool = False
    row: RowSampling = field(init=False)  # built once: the decode loop reads it every step
    hashes: list[int] = field(init=False)  # block hashes of the prompt (prefix_index.py)

    def __post_init__(self) -> None:
        self.row = RowSampling(self.sampling.temperature, self.sampling.top_k, self.sampling.top_p, self.generator)
        self.hashes = block_hashes(self.input_ids)

    @property
    def prefix_tokens(self) -> list[int]:
        """Tokens whose keys/values a running request's row holds from the start: at least its prompt."""
        return self.input_ids

    def result(
        self, reason: FinishReason, current: int, *, matched: int | str | None = None, message: str | None = None
    ) -> GenerateResult:
        """What the caller receives now that the request ends (``current``: the engine's policy version)."""
        return GenerateResult(
            request_id=self.rid,
            output_ids=self.output_ids,
            logprobs=self.logprobs,
            finish_reason=reason,
            version_spans=spans_from_versions(self.versions, current),
            prompt_tokens=len(self.input_ids),
            cached_tokens=self.cached_tokens,
            matched_stop=matched,
            extra={"message": message} if message else {},
        )


def spans_from_versions(versions: list[int], current: int) -> list[VersionSpan]:
    """Run-length encode per-token versions; an empty output gets one empty span at ``current``."""
    if not versions:
        return [VersionSpan(current, 0, 0)]
    spans: list[VersionSpan] = []
    start = 0
    for i in range(1, len(versions) + 1):
        if i == len(versions) or versions[i] != versions[start]:
            spans.append(VersionSpan(versions[start], start, i))
            start = i
    return spans


def deliver(req: Request, outcome: GenerateResult | Exception) -> None:
    """Resolve the caller's future on its own loop (a closed loop means nobody waits any more)."""

    def resolve() -> None:
        if req.future.done():
            return
        if isinstance(outcome, Exception):
            req.future.set_exception(outcome)
        else:
            req.future.set_result(outcome)

    try:
        req.loop.call_soon_threadsafe(resolve)
    except RuntimeError:  # the caller's event loop is closed
        pass
