"""SGLangEngine: the InferenceEngine protocol over SGLang servers (or sglang-routers) and their native HTTP API.

Non-streaming ``/generate`` with ``input_ids`` + ``return_logprob``; ids are checked against the logprob
triples; a queued-abort reply or a missing logprob key means zero tokens. Each configured URL is a server
or an sglang-router (``sglang.topology``); generation goes through it, while aborts, weight updates and the
settings check go to every worker behind it. Every reply's ``weight_version`` is checked against the
policy version the request was sent under, so a server that restarted or missed an update cannot
silently sample from old weights.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrl.engines.base import GenerateResult, LogprobSemantics, SamplingParams, new_request_id
from agentrl.engines.http_base import CONTROL_TIMEOUT_S, HttpEngineBase, HttpTransport, ServerDown, error_text
from agentrl.engines.routing import ServerPicker
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.sglang.session import weight_update_session
from agentrl.engines.sglang.settings import INVISIBLE_SETTINGS, ServerSettings, check_request
from agentrl.engines.sglang.topology import Entry, discover, list_router_workers, read_workers
from agentrl.engines.sglang.wire import parse_reply, sampling_to_json, version_to_wire
from agentrl.engines.weight_dirs import publish_state_dict
from agentrl.errors import EngineConfigError, EngineError

_ABORT_WAIT_S = 10.0  # abort() re-sends until its targets return (an abort can race the request)


class SGLangEngine(HttpEngineBase):
    """HTTP client for SGLang servers, sglang-routers, or ``agentrl serve``."""

    semantics = LogprobSemantics.TEMPERED_FULL_VOCAB
    server_kind = "SGLang server"

    def __init__(self, config: SGLangEngineConfig, *, model_path: str | None = None) -> None:
        if not config.urls:
            raise EngineConfigError(
                "engine.kind=sglang needs engine.urls, e.g. ['http://127.0.0.1:30000']; start a server with "
                "scripts/launch_sglang.sh"
            )
        self.config = config
        urls = [u.rstrip("/") for u in config.urls]
        http = HttpTransport(
            config.max_retries,
            server=self.server_kind,
            start_hint="start one with scripts/launch_sglang.sh or `agentrl serve`",
        )
        super().__init__(urls, http, ServerPicker(urls, config.routing, config.sticky_load_slack), model_path)
        self.entries: dict[str, Entry] = {}
        self.settings: dict[str, ServerSettings] = {}  # per worker
        self._version = 0
        self._probe_lock: asyncio.Lock | None = None

    @property
    def weight_version(self) -> int:
        """The policy version the servers serve: read from them at probe time, then set by ``update_weights``."""
        return self._version

    @property
    def served_dtypes(self) -> set[str | None]:
        """The dtypes the workers report (known after ``probe``; None where a server does not report one)."""
        return {s.dtype for s in self.settings.values()}

    @property
    def workers(self) -> list[str]:
        """Every worker behind the configured URLs (known after ``probe``)."""
        return list(dict.fromkeys(w for e in self.entries.values() for w in e.workers))

    async def probe(self) -> list[str]:
        """Discover the workers, check their settings and weight versions; returns lines for ``--dry-run``."""
        await self._probe()
        lines = [
            f"engine sglang: {e.url} is an sglang-router over {len(e.workers)} worker(s)"
            for e in self.entries.values()
            if e.is_router
        ]
        lines += [f"engine sglang: {s.describe()}, weight_version {self._version}" for s in self.settings.values()]
        return [*lines, f"engine sglang: {INVISIBLE_SETTINGS}"]

    async def _probe(self, refresh: bool = False) -> None:
        if self._probe_lock is None:
            self._probe_lock = asyncio.Lock()
        async with self._probe_lock:
            if self.entries and not refresh:
                return
            entries = await asyncio.gather(*(discover(self.http, u) for u in self.urls))
            workers = list(dict.fromkeys(w for e in entries for w in e.workers))
            read = await read_workers(self.http, [w for w in workers if w not in self.settings or not refresh])
            versions = {url: version for url, (_, version) in read.items()}
            if not self.entries and len(set(versions.values())) > 1:
                raise EngineConfigError(
                    f"the servers serve different weight versions {versions}; restart them from the same model "
                    "(or load one model into all with /update_weights_from_disk) before training"
                )
            self.settings.update({url: s for url, (s, _) in read.items()})
            if not self.entries and versions:
                self._version = next(iter(versions.values()))
            self.entries = {e.url: e for e in entries}

    # --- the protocol ------------------------------------------------------------------------------
    async def generate(
        self, input_ids: list[int], sampling: SamplingParams, request_id: str | None = None
    ) -> GenerateResult:
        """POST /generate (non-streaming, input_ids, return_logprob) to the server ``engine.routing`` picks."""
        self._check_sampling(sampling)
        if not input_ids:
            raise EngineError("input_ids is empty; send at least one prompt token")
        await self._probe()
        rid = request_id or new_request_id()
        body = {
            "input_ids": list(input_ids),
            "sampling_params": sampling_to_json(sampling),
            "return_logprob": True,
            "rid": rid,
            "stream": False,
        }
        sent_version = self._version
        async with self._sending(rid, input_ids) as url:
            for worker in self.entries[url].workers:
                if worker in self.settings:
                    check_request(self.settings[worker], sampling.stop)
            reply = await self._post(url, "/generate", body, self.config.request_timeout_s, rid)
        result = parse_reply(
            reply[0] if isinstance(reply, list) else reply, request_id=rid, prompt_len=len(input_ids), source=url
        )
        self._check_version(result, sent_version, url)
        result.semantics = self.semantics
        result.extra["server"] = url
        return result

    def _check_version(self, result: GenerateResult, sent_version: int, url: str) -> None:
        """Tokens sampled after the request was sent must come from the policy it was sent under, or newer."""
        if result.output_ids and result.version_spans[-1].version < sent_version:
            raise EngineError(
                f"SGLang server {url} sampled request {result.request_id} with weight_version "
                f"{result.version_spans[-1].version}, but the policy is at version {sent_version}: the server "
                "restarted or missed a weight update. Restart the run (--resume) so the trainer syncs it again"
            )

    def _check_sampling(self, sampling: SamplingParams) -> None:
        self._refuse_truncated(
            sampling,
            self.config.allow_truncated_sampling,
            "SGLang's logprobs ignore top-p/top-k, so they would not be the behaviour logprobs the trainer needs",
        )

    async def abort(self, request_ids: list[str] | None = None) -> None:
        """Abort requests (None: all) on the workers that run them; wait (bounded) until they returned."""
        targets = list(self._inflight) if request_ids is None else [r for r in request_ids if r in self._inflight]
        if not targets and request_ids is not None:
            return
        await self._probe()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _ABORT_WAIT_S
        while True:
            if request_ids is None:
                await self._broadcast_control(self.workers, "/abort_request", {"abort_all": True})
            else:
                by_entry: dict[str, list[str]] = {}
                for rid in targets:
                    if rid in self._inflight:
                        by_entry.setdefault(self._inflight[rid].url, []).append(rid)
                await asyncio.gather(
                    *(
                        self._broadcast_control(self.entries[e].workers, "/abort_request", {"rid": r})
                        for e, rids in by_entry.items()
                        for r in rids
                    )
                )
            if not any(r in self._inflight for r in targets) or loop.time() > deadline:
                return
            await self._wait_returned(targets, 0.2)
            targets = [r for r in targets if r in self._inflight]
            if not targets:
                return

    async def _broadcast_control(self, workers: list[str], path: str, body: dict[str, Any]) -> None:
        """POST a control call to every worker. A worker that is down has nothing running to abort; a
        worker that does not know the route makes aborts impossible, which must not pass silently."""

        async def one(url: str) -> None:
            try:
                status, reply = await self.http.call("POST", url, path, body, CONTROL_TIMEOUT_S, retries=0)
            except ServerDown:
                return
            if status == 404:
                raise EngineConfigError(
                    f"{url}{path} answered 404: requests cannot be aborted there, so partial rollouts could not cut "
                    "at step boundaries. Point engine.urls at SGLang servers (>= 0.4.9) or at an sglang-router whose "
                    "workers are such servers"
                )
            if status != 200:
                raise EngineError(f"SGLang server {url}{path} failed (HTTP {status}): {error_text(reply)}")

        await asyncio.gather(*(one(u) for u in workers))

    async def update_weights(self, source: Mapping[str, Any] | str | Path, version: int) -> None:
        """Load new weights on every worker as ``version``: a directory (or a state dict written to
        ``engine.weights_dir``) via /update_weights_from_disk, or tensors via /update_weights_from_tensor inside a
        /begin_weight_update ... /end_weight_update session when ``engine.weight_transfer == "tensor"`` (colocated,
        same host; one payload per TP rank)."""
        await self._probe(refresh=True)  # a router may have gained or lost workers since the last update
        body: dict[str, Any] = {
            "weight_version": version_to_wire(version),
            "abort_all_requests": self.config.on_weight_update == "abort",
        }
        timeout = max(self.config.request_timeout_s, CONTROL_TIMEOUT_S)
        if isinstance(source, Mapping) and self.config.weight_transfer == "tensor":
            from agentrl.engines.tensor_wire import SharedTensors

            shared = await asyncio.to_thread(SharedTensors, source)
            try:
                calls = []
                for url in self.workers:
                    payloads = await asyncio.to_thread(shared.payloads, self.settings[url].tp_size)
                    calls.append((url, {**body, "serialized_named_tensors": payloads, "flush_cache": True}))
                route, what = "/update_weights_from_tensor", f"{len(source)} tensors"
                async with weight_update_session(self.http, self.workers, timeout):  # SGLang 0.5.23 needs one
                    replies = await asyncio.gather(*(self.http.call("POST", u, route, b, timeout) for u, b in calls))
            finally:
                shared.close()
        else:
            path = (
                Path(source)
                if isinstance(source, (str, Path))
                else publish_state_dict(self.config.weights_dir, source, version, "SGLang")
            )
            route, what = "/update_weights_from_disk", str(path)
            disk = {**body, "model_path": str(path.resolve())}
            replies = await asyncio.gather(*(self.http.call("POST", u, route, disk, timeout) for u in self.workers))
        for url, (status, reply) in zip(self.workers, replies):
            if status != 200 or not (isinstance(reply, dict) and reply.get("success")):
                raise EngineError(
                    f"SGLang server {url} failed to load weights from {what} (HTTP {status}): {error_text(reply)}"
                )
        self._version = int(version)

    async def _healthy(self, url: str) -> bool:
        """/health answers 200, and a router lists a worker."""
        if not await super()._healthy(url):
            return False
        entry = self.entries.get(url)
        return not (entry and entry.is_router) or bool(await list_router_workers(self.http, url))
