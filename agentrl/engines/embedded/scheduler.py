"""The embedded engine's continuous-batching loop, run by one background thread that owns the model.

Each iteration: reap aborted requests, apply a pending weight update (or memory release) once no request
runs, then one forward pass that decodes every running request and admits waiting ones (their
prompts, or only the part after a head already held, prefilled in the same pass). Callers on any
asyncio loop get their result through ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Literal

import torch

from agentrl.engines.base import FinishReason, GenerateResult, SamplingParams, VersionSpan
from agentrl.engines.embedded.kv_cache import PrefixKV
from agentrl.engines.embedded.prefix_cache import PrefixCache, PrefixEntry
from agentrl.engines.embedded.prefix_index import BLOCK, PrefixIndex, block_hashes
from agentrl.engines.embedded.runner import ModelRunner
from agentrl.engines.embedded.sampling import RowSampling, SamplingPlan, sample_tokens
from agentrl.engines.embedded.weights import copy_state_dict
from agentrl.errors import EngineError
from agentrl.heap import trim_heap

QUEUED_ABORT_MESSAGE = "Abort in waiting queue"  # SGLang 0.5.x's reply text for a queued abort
RUNNING_ABORT_MESSAGE = "Abort request"


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


@dataclass
class _WeightUpdate:
    state_dict: dict[str, torch.Tensor]
    version: int
    done: Future[None]


class Scheduler:
    """Owns the ModelRunner; every public method is safe to call from any thread."""

    def __init__(
        self,
        runner: ModelRunner,
        tokenizer: object,
        *,
        max_batch: int,
        max_prefill_tokens: int,
        seed: int,
        weight_update: Literal["finish_old", "abort"],
        prefix_cache_tokens: int = 0,
        share_prefixes: bool = True,
    ) -> None:
        self.runner = runner
        self.prefix_cache = PrefixCache(prefix_cache_tokens)
        self.share_prefixes = share_prefixes
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.max_prefill_tokens = max_prefill_tokens
        self.weight_update = weight_update
        self.version = 0
        self.forwards = 0  # forward passes so far
        self.steps = 0  # passes that decoded running requests
        self.prefills = 0  # passes that admitted requests (a mixed pass counts in both)
        self._gen = torch.Generator(device=runner.device).manual_seed(seed)
        self._cond = threading.Condition()
        self._waiting: collections.deque[Request] = collections.deque()
        self._running: list[Request] = []  # row i of the KV cache <-> _running[i]
        self._live: PrefixIndex[Request] = PrefixIndex()  # the prompts of running requests, by block
        self._plan: SamplingPlan | None = None  # the running rows' sampling settings; None when they changed
        self._by_id: dict[str, Request] = {}
        self._update: _WeightUpdate | None = None
        self._releases: list[Future[None]] = []  # release_memory() callers waiting for an idle moment
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="agentrl-engine", daemon=True)
        self._thread.start()

    # --- called from any thread ------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        """Queue a request (its rid must not be in flight)."""
        with self._cond:
            if self._closed:
                raise EngineError("the embedded engine is closed; create a new engine")
            if req.rid in self._by_id:
                raise EngineError(
                    f"request id {req.rid!r} is already in flight; use agentrl.engines.base.new_request_id()"
                )
            self._by_id[req.rid] = req
            self._waiting.append(req)
            self._cond.notify()

    def abort(self, rids: list[str] | None) -> None:
        """Abort queued requests now; running ones return their partial output after this step."""
        with self._cond:
            targets = list(self._by_id.values()) if rids is None else [self._by_id[r] for r in rids if r in self._by_id]
            for req in targets:
                req.aborted = True
                if req in self._waiting:
                    self._waiting.remove(req)
                    self._finish_locked(req, "abort", message=QUEUED_ABORT_MESSAGE)
            self._cond.notify()

    def active_ids(self) -> list[str]:
        """Request ids queued or running."""
        with self._cond:
            return list(self._by_id)

    def request_update(self, state_dict: dict[str, torch.Tensor], version: int) -> Future[None]:
        """Swap in new weights between forward passes; the future resolves once they are live."""
        done: Future[None] = Future()
        with self._cond:
            if self._update is not None:
                raise EngineError("a weight update is already pending; await it before sending another")
            self._update = _WeightUpdate(state_dict, version, done)
            self._cond.notify()
        return done

    def request_release(self) -> Future[None]:
        """Free the KV buffers and the prefix cache once no request runs (queued ones wait until then)."""
        done: Future[None] = Future()
        with self._cond:
            self._releases.append(done)
            self._cond.notify()
        return done

    def close(self) -> None:
        """Stop the loop; requests still in flight return as aborted."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=30)

    @property
    def alive(self) -> bool:
        """False once the loop thread has stopped."""
        return self._thread.is_alive()

    def load(self) -> tuple[int, int]:
        """(running, waiting) request counts."""
        with self._cond:
            return len(self._running), len(self._waiting)

    # --- the loop (scheduler thread only) ----------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._closed or self._running or self._update or self._waiting or self._releases):
                    self._cond.wait()
                if self._closed:
                    break
                admit = [] if self._update or self._releases else self._pop_admissible()
            if self._update is not None and self.weight_update == "abort":
                for req in self._running:  # abort mode: running requests return their partial output now
                    req.aborted = True
            self._reap_aborted()
            if self._update is not None and not self._running:
                self._apply_update()
            if self._releases and not self._running:
                self._apply_release()
            try:
                if admit or self._running:
                    self._step(admit)
            except Exception as exc:  # a failed forward (OOM, bad weights): fail the batch, keep serving
                self._fail_all(admit, exc)
        self._shutdown()

    def _pop_admissible(self) -> list[Request]:
        """Waiting requests that fit the batch and the prefill budget, oldest first. A request sharing a
        longer head with one admitted now than with anything held waits one step, then copies that
        head's keys/values: a GRPO group's G episodes start from one prompt, and a tool-use env's
        prompts share a long system prompt, so the shared part is computed once, not once per request."""
        slots = self.max_batch - len(self._running)
        admit: list[Request] = []
        deferred: list[Request] = []
        batch: PrefixIndex[Request] = PrefixIndex()
        longest = 0
        while self._waiting and len(admit) < slots:
            req = self._waiting[0]
            if admit and self.share_prefixes and self._shared_with(batch, req) > self._shared_with_held(req):
                deferred.append(self._waiting.popleft())
                continue
            longest = max(longest, len(req.input_ids))
            if admit and longest * (len(admit) + 1) > self.max_prefill_tokens:
                break
            admit.append(self._waiting.popleft())
            batch.add(req, req.hashes)
        self._waiting.extendleft(reversed(deferred))
        return admit

    @staticmethod
    def _shared_with(index: PrefixIndex[Request], req: Request) -> int:
        """Prompt tokens worth copying from ``index``'s best owner (0 below one block; never the last token)."""
        shared = min(index.longest(req.input_ids, req.hashes)[1], len(req.input_ids) - 1)
        return shared if shared >= BLOCK else 0

    def _held_heads(self, req: Request) -> tuple[PrefixEntry | None, int, Request | None, int]:
        """The best kept entry and the best running request for ``req``'s prompt, each with the length of
        the head it holds, capped at every prompt token but the last (whose logits start the reply)."""
        limit = len(req.input_ids) - 1
        entry, from_entry = (
            self.prefix_cache.longest(req.input_ids, req.hashes) if self.prefix_cache.enabled else (None, 0)
        )
        twin, from_twin = self._live.longest(req.input_ids, req.hashes) if self.share_prefixes else (None, 0)
        return entry, min(from_entry, limit), twin, min(from_twin, limit)

    def _shared_with_held(self, req: Request) -> int:
        _, from_entry, _, from_twin = self._held_heads(req)
        return max(from_entry, from_twin)

    def _kept_prefix(self, req: Request) -> PrefixKV | None:
        """Keys/values for the longest head of ``req``'s prompt held by the prefix cache or by a running
        request; sets ``cached_tokens``. None: prefill the whole prompt."""
        entry, from_entry, twin, from_twin = self._held_heads(req)
        if max(from_entry, from_twin) < BLOCK:
            return None
        if entry is not None and from_entry >= from_twin:
            req.cached_tokens = from_entry
            return self.prefix_cache.use(entry, from_entry)
        req.cached_tokens = from_twin
        return self.runner.row_kv(self._running.index(twin), length=from_twin)

    def _reap_aborted(self) -> None:
        for row in reversed(range(len(self._running))):
            if self._running[row].aborted:
                req = self._remove_row(row, keep_prefix=True)  # a resumed partial rollout extends it
                self._finish(req, "abort", message=RUNNING_ABORT_MESSAGE)

    def _apply_update(self) -> None:
        with self._cond:
            update, self._update = self._update, None
        try:
            copy_state_dict(self.runner.model, update.state_dict)
            self.prefix_cache.clear()  # keys/values of the old weights are not the new policy's
            self.version = update.version
            update.done.set_result(None)
        except Exception as exc:  # reported to the caller of update_weights
            update.done.set_exception(exc)

    def _apply_release(self) -> None:
        with self._cond:
            waiters, self._releases = self._releases, []
        self.prefix_cache.clear()
        self.runner.free()
        trim_heap()
        for done in waiters:
            done.set_result(None)

    def _step(self, admit: list[Request]) -> None:
        """One forward pass: decode every running request and admit ``admit`` (fresh prompts first,
        then prompts that extend a prefix-cache entry and prefill only their new tokens)."""
        fresh: list[tuple[Request, PrefixKV | None]] = []
        extended: list[tuple[Request, PrefixKV | None]] = []
        for req in admit:
            kv = self._kept_prefix(req)
            (fresh if kv is None else extended).append((req, kv))
        joining = fresh + extended
        running = list(self._running)
        logits = self.runner.step(
            [r.output_ids[-1] for r in running], [(kv, r.input_ids[r.cached_tokens :]) for r, kv in joining]
        )
        self.forwards += 1
        parts: list[tuple[torch.Tensor, int, list[Request], SamplingPlan]] = []
        if running:
            self.steps += 1
            if self._plan is None:
                self._plan = SamplingPlan([r.row for r in running], logits.device)
            parts.append((logits[: len(running)], 0, running, self._plan))
        if joining:
            self.prefills += 1
            new = [r for r, _ in joining]
            self._running.extend(new)
            for req in new:
                self._live.add(req, req.hashes)
            self._plan = None
            parts.append((logits[len(running) :], len(running), new, SamplingPlan([r.row for r in new], logits.device)))
        self._sample_and_check(parts)

    def _sample_and_check(self, parts: list[tuple[torch.Tensor, int, list[Request], SamplingPlan]]) -> None:
        """Sample every part's rows, then retire finished rows from the highest row down (a removal
        moves the last row into the freed slot)."""
        finished: list[tuple[int, FinishReason, int | str | None]] = []
        for logits, first_row, reqs, plan in parts:
            tokens_b, logprobs_b = sample_tokens(logits, plan, self._gen)
            for i, (req, tok, lp) in enumerate(zip(reqs, tokens_b.tolist(), logprobs_b.tolist())):
                req.output_ids.append(tok)
                req.logprobs.append(lp)
                req.versions.append(self.version)
                reason, matched = self._check_finished(req, tok)
                if reason is not None:
                    finished.append((first_row + i, reason, matched))
        for row, reason, matched in sorted(finished, reverse=True):
            req = self._remove_row(row, keep_prefix=True)
            self._finish(req, reason, matched=matched)

    def _check_finished(self, req: Request, tok: int) -> tuple[FinishReason | None, int | str | None]:
        """SGLang's order: length first, then stop token ids (EOS included), then stop strings."""
        if len(req.output_ids) >= req.max_new:
            return "length", None
        if tok in req.stop_ids:
            return "stop", tok
        if req.sampling.stop:
            window = 4 * max(len(s) for s in req.sampling.stop) + 1  # a token is >= 1 byte, a char <= 4
            tail = self.tokenizer.decode(req.output_ids[-window:])
            for stop in req.sampling.stop:
                if stop in tail:
                    return "stop", stop
        return None, None

    def _remove_row(self, row: int, *, keep_prefix: bool = False) -> Request:
        req = self._running[row]
        if keep_prefix and self.prefix_cache.enabled:
            # the row holds every token but the last sampled one, which was never fed to the model
            self.prefix_cache.put(req.input_ids + req.output_ids[:-1], self.runner.row_kv(row))
        self.runner.remove_row(row)
        self._running[row] = self._running[-1]  # mirror the cache's last-row move
        self._running.pop()
        self._live.remove(req, req.hashes)
        self._plan = None
        return req

    def _fail_all(self, admit: list[Request], exc: Exception) -> None:
        self.runner.clear()
        victims = {id(r): r for r in [*self._running, *admit]}.values()
        self._running = []
        self._live.clear()
        self._plan = None
        error = EngineError(f"embedded engine forward failed: {type(exc).__name__}: {exc}")
        with self._cond:
            for req in victims:
                self._by_id.pop(req.rid, None)
                _deliver(req, error)

    def _shutdown(self) -> None:
        with self._cond:
            for req in list(self._waiting):
                self._finish_locked(req, "abort", message="engine closed")
            self._waiting.clear()
        for req in self._running:
            self._finish(req, "abort", message="engine closed")
        self._running = []
        if self._update is not None:
            self._update.done.set_exception(EngineError("engine closed before the weight update was applied"))
        for done in self._releases:
            done.set_result(None)  # a closed engine holds nothing

    def _finish(
        self, req: Request, reason: FinishReason, *, matched: int | str | None = None, message: str | None = None
    ) -> None:
        with self._cond:
            self._finish_locked(req, reason, matched=matched, message=message)

    def _finish_locked(
        self, req: Request, reason: FinishReason, *, matched: int | str | None = None, message: str | None = None
    ) -> None:
        self._by_id.pop(req.rid, None)
        extra: dict[str, object] = {"message": message} if message else {}
        result = GenerateResult(
            request_id=req.rid,
            output_ids=req.output_ids,
            logprobs=req.logprobs,
            finish_reason=reason,
            version_spans=spans_from_versions(req.versions, self.version),
            prompt_tokens=len(req.input_ids),
            cached_tokens=req.cached_tokens,
            matched_stop=matched,
            extra=extra,
        )
        _deliver(req, result)


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


def _deliver(req: Request, outcome: GenerateResult | Exception) -> None:
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
