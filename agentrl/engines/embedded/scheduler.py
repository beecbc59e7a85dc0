"""The embedded engine's continuous-batching loop, run by one background thread that owns the model.

Each iteration: reap aborted requests, apply a pending weight update (or memory release) once no request
runs, then one forward pass that decodes every running request and admits waiting ones (their
prompts, or only the part after a head already held, prefilled in the same pass). Callers on any
asyncio loop get their result through ``call_soon_threadsafe``. Invariant: no ``generate`` waits
forever: a failed iteration fails the requests it held with an EngineError and the loop serves on;
if the loop itself dies, every pending request fails and new ones are refused.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Literal

import torch

from agentrl.engines.base import FinishReason
from agentrl.engines.embedded.kv_cache import PrefixKV
from agentrl.engines.embedded.prefix_cache import PrefixCache, PrefixEntry
from agentrl.engines.embedded.prefix_index import BLOCK, PrefixIndex
from agentrl.engines.embedded.requests import Request, deliver
from agentrl.engines.embedded.runner import ModelRunner
from agentrl.engines.embedded.sampling import SamplingPlan, sample_tokens
from agentrl.errors import EngineError
from agentrl.util.heap import trim_heap

QUEUED_ABORT_MESSAGE = "Abort in waiting queue"  # SGLang 0.5.x's reply text for a queued abort
RUNNING_ABORT_MESSAGE = "Abort request"


@dataclass
class _WeightUpdate:
    apply: Callable[[torch.nn.Module], object]  # changes the model's weights (copy_state_dict, share_storage)
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
        on_weight_update: Literal["finish_old", "abort"],
        prefix_cache_tokens: int = 0,
        share_prefixes: bool = True,
    ) -> None:
        self.runner = runner
        self.prefix_cache = PrefixCache(prefix_cache_tokens)
        self.share_prefixes = share_prefixes
        self.tokenizer = tokenizer
        self.max_batch = max_batch
        self.max_prefill_tokens = max_prefill_tokens
        self.on_weight_update = on_weight_update
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
        self._stopped_by: str | None = None  # why the loop died, once it has
        self._thread = threading.Thread(target=self._loop, name="agentrl-engine", daemon=True)
        self._thread.start()

    # --- called from any thread ------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        """Queue a request (its rid must not be in flight)."""
        with self._cond:
            self._check_open()
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

    def request_update(self, apply: Callable[[torch.nn.Module], object], version: int) -> Future[None]:
        """Run ``apply(model)`` between forward passes; the future resolves once the new weights are live."""
        done: Future[None] = Future()
        with self._cond:
            self._check_open()
            if self._update is not None:
                raise EngineError("a weight update is already pending; await it before sending another")
            self._update = _WeightUpdate(apply, version, done)
            self._cond.notify()
        return done

    def request_release(self) -> Future[None]:
        """Free the KV buffers and the prefix cache once no request runs (queued ones wait until then)."""
        done: Future[None] = Future()
        with self._cond:
            if self._closed:
                done.set_result(None)  # a closed engine holds no caches; its loop would never answer
                return done
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

    def _check_open(self) -> None:
        if self._stopped_by is not None:
            raise EngineError(f"the embedded engine's scheduler stopped: {self._stopped_by}; create a new engine")
        if self._closed:
            raise EngineError("the embedded engine is closed; create a new engine")

    # --- the loop (scheduler thread only) ----------------------------------------------------------
    def _loop(self) -> None:
        died: Exception | None = None
        try:
            while (admit := self._next_admissions()) is not None:
                try:
                    self._iterate(admit)
                except Exception as exc:  # a forward (OOM, bad weights), an abort's key/value copy, ...
                    self._fail_all(admit, exc)  # fail the requests it held, serve on
        except Exception as exc:  # the loop itself failed: nothing serves from here on
            died = exc
        finally:
            self._shutdown(died)

    def _next_admissions(self) -> list[Request] | None:
        """Wait for work; None once closed, else the waiting requests to admit in the next step."""
        with self._cond:
            while not (self._closed or self._running or self._update or self._waiting or self._releases):
                self._cond.wait()
            if self._closed:
                return None
            return [] if self._update or self._releases else self._pop_admissible()

    def _iterate(self, admit: list[Request]) -> None:
        if self._update is not None and self.on_weight_update == "abort":
            for req in self._running:  # abort mode: running requests return their partial output now
                req.aborted = True
        self._reap_aborted()
        if self._update is not None and not self._running:
            self._apply_update()
        if self._releases and not self._running:
            self._apply_release()
        if admit or self._running:
            self._step(admit)

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
            update.apply(self.runner.model)
            self.runner.weights_changed()  # packed copies, also of weights written through shared storage
            self.prefix_cache.clear()  # keys/values of the old weights are not the new policy's
            self.version = update.version
            update.done.set_result(None)
        except Exception as exc:  # reported to the caller of update_weights
            update.done.set_exception(exc)

    def _apply_release(self) -> None:
        with self._cond:
            waiters, self._releases = self._releases, []
        try:
            self.prefix_cache.clear()
            self.runner.free()
            trim_heap()
        except Exception as exc:  # reported to the caller of release_memory, the engine serves on
            for done in waiters:
                done.set_exception(exc)
            raise
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
        """Fail every request the failed iteration held (running or being admitted) and reset the batch."""
        victims = list({id(r): r for r in [*self._running, *admit]}.values())
        self._running = []
        self._live.clear()
        self._plan = None
        error = EngineError(f"embedded engine step failed: {type(exc).__name__}: {exc}")
        with self._cond:
            for req in victims:
                self._by_id.pop(req.rid, None)
                deliver(req, error)
        self.prefix_cache.clear()  # a failure mid-copy may have left an entry half-written
        self.runner.clear()  # if this raises too, the loop dies and _shutdown fails everything else

    def _shutdown(self, died: Exception | None) -> None:
        """Return every pending request: aborted when the engine closes, an EngineError when the loop died."""
        reason = None if died is None else f"{type(died).__name__}: {died}"
        with self._cond:
            self._closed, self._stopped_by = True, reason
            pending = [*self._waiting, *self._running]
            self._waiting.clear()
            self._running = []
            update, self._update = self._update, None
            releases, self._releases = self._releases, []
            for req in pending:
                if reason is None:
                    self._finish_locked(req, "abort", message="engine closed")
                else:
                    self._by_id.pop(req.rid, None)
                    deliver(req, EngineError(f"the embedded engine's scheduler stopped: {reason}"))
        if update is not None and not update.done.done():
            why = "engine closed" if reason is None else f"the embedded engine's scheduler stopped: {reason}"
            update.done.set_exception(EngineError(f"{why} before the weight update was applied"))
        for done in releases:
            done.set_result(None)  # a stopped engine holds no caches

    def _finish(
        self, req: Request, reason: FinishReason, *, matched: int | str | None = None, message: str | None = None
    ) -> None:
        with self._cond:
            self._finish_locked(req, reason, matched=matched, message=message)

    def _finish_locked(
        self, req: Request, reason: FinishReason, *, matched: int | str | None = None, message: str | None = None
    ) -> None:
        self._by_id.pop(req.rid, None)
        deliver(req, req.result(reason, self.version, matched=matched, message=message))
