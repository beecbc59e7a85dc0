"""VLLMEngine: the InferenceEngine protocol over vLLM OpenAI-compatible servers.

Generation is non-streaming ``/v1/completions`` with token-id prompts (``vllm.wire``). Aborts and weight
updates use the server's dev-mode routes (``VLLM_SERVER_DEV_MODE=1``): ``POST /pause?mode=abort`` ends
every running request on a server, which returns its partial tokens with ``finish_reason: "abort"``, then
``/resume``. That cuts everything on the server, so it is used only where every request there is meant; any
other abort closes the meant request's HTTP call, which vLLM treats as an abort. A server serves one run.

Policy versions are the client's: an update pauses each server (``mode=wait`` finishes running requests
under the old weights, ``mode=abort`` cuts them), reloads, and resumes, and no request is sent while an
update runs. So a request's tokens all come from the version in effect when it was sent. A server keeps the
weights an earlier run left, so a fresh run pushes its start weights as version 0 before sampling (the trainer's
start-up sync); each server's ``/weight_info`` is read back after every reload and shown by ``--dry-run``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrl.engines.base import GenerateResult, LogprobSemantics, SamplingParams, VersionSpan, new_request_id
from agentrl.engines.http_base import CONTROL_TIMEOUT_S, HttpEngineBase, HttpTransport, ServerDown, error_text
from agentrl.engines.routing import ServerPicker
from agentrl.engines.vllm.config import VLLMEngineConfig
from agentrl.engines.vllm.probe import (
    check_logprob_semantics,
    check_reloadable,
    check_reloadable_state,
    served_model,
    weight_version,
)
from agentrl.engines.vllm.wire import completion_body, parse_completion
from agentrl.engines.weight_dirs import publish_state_dict
from agentrl.errors import EngineConfigError, EngineError


class VLLMEngine(HttpEngineBase):
    """HTTP client for vLLM servers launched in dev mode with tempered logprobs (see docs/engines.md)."""

    semantics = LogprobSemantics.TEMPERED_FULL_VOCAB
    server_kind = "vLLM server"

    def __init__(self, config: VLLMEngineConfig, *, model_path: str | None = None) -> None:
        if not config.urls:
            raise EngineConfigError("engine.kind=vllm needs engine.urls, e.g. ['http://127.0.0.1:8000']")
        self.config = config
        urls = [u.rstrip("/") for u in config.urls]
        http = HttpTransport(
            config.max_retries,
            server=self.server_kind,
            start_hint="start one as docs/engines.md's vLLM section shows, with VLLM_SERVER_DEV_MODE=1",
        )
        super().__init__(urls, http, ServerPicker(urls, "sticky"), model_path)
        self.model_name: str | None = config.served_model_name
        self._version = 0
        self._idle: asyncio.Event | None = None  # set while no weight update runs
        self._no_abort_pause: asyncio.Event | None = None  # set while no abort pauses a server
        self._pausing = 0
        self._probed = False
        self._probe_lock: asyncio.Lock | None = None

    @property
    def weight_version(self) -> int:
        """The policy version requests sent now are sampled from."""
        return self._version

    async def probe(self) -> list[str]:
        """Find the served model name and check the servers' logprob semantics; lines for ``--dry-run``."""
        lines = []
        for url in self.urls:
            name = self.model_name or await served_model(self.http, url)
            self.model_name = name
            served = await weight_version(self.http, url)
            lines.append(
                f"engine vllm: {url} serves {name!r}, weight_version {served or 'none (never reloaded)'}; a fresh run "
                "loads its start weights there before sampling"
            )
            semantics, line = await check_logprob_semantics(self.http, url, name)
            if semantics != LogprobSemantics.TEMPERED_FULL_VOCAB:
                self.semantics = semantics  # any raw server makes the whole engine raw
            lines.append(f"engine vllm: {url} {line}")
            lines.append(f"engine vllm: {url} {await self._check_dev_mode(url)}")
        self._probed = True
        return lines

    async def _probe_once(self) -> None:
        """``probe`` before the first request or update: once, however many episodes start together."""
        if self._probe_lock is None:
            self._probe_lock = asyncio.Lock()
        async with self._probe_lock:
            if not self._probed:
                await self.probe()

    async def _check_dev_mode(self, url: str) -> str:
        status, reply = await self.http.call("GET", url, "/is_paused")
        if status == 404:
            raise EngineConfigError(
                f"{url}/is_paused answered 404: the server runs without VLLM_SERVER_DEV_MODE=1, so requests cannot "
                "be aborted at step boundaries nor weights reloaded; restart it with VLLM_SERVER_DEV_MODE=1"
            )
        if status != 200:
            raise EngineError(f"vLLM server {url}/is_paused failed (HTTP {status}): {error_text(reply)}")
        if isinstance(reply, dict) and reply.get("is_paused"):
            await self._control(url, "/resume")
            return "was paused (left by an earlier run); resumed"
        return "dev mode: pause/abort/resume available"

    def _unpaused(self) -> asyncio.Event:
        if self._no_abort_pause is None:
            self._no_abort_pause = asyncio.Event()
            self._no_abort_pause.set()
        return self._no_abort_pause

    def _gate(self) -> asyncio.Event:
        if self._idle is None:
            self._idle = asyncio.Event()
            self._idle.set()
        return self._idle

    # --- the protocol ------------------------------------------------------------------------------
    async def generate(
        self, input_ids: list[int], sampling: SamplingParams, request_id: str | None = None
    ) -> GenerateResult:
        """POST /v1/completions with token ids; tokens are attributed to the version in effect when sent."""
        if not input_ids:
            raise EngineError("input_ids is empty; send at least one prompt token")
        await self._probe_once()
        self._check_sampling(sampling)  # after the probe: it measures whether logprobs are tempered
        # never send while a weight update runs (its version would be ambiguous) or an abort pauses a server
        while not (self._gate().is_set() and self._unpaused().is_set()):
            await self._gate().wait()
            await self._unpaused().wait()
        rid = request_id or new_request_id()
        assert self.model_name is not None  # set by probe
        body = completion_body(self.model_name, input_ids, sampling, rid)
        version = self._version
        async with self._sending(rid, input_ids) as url:
            reply = await self._post(url, "/v1/completions", body, self.config.request_timeout_s, rid)
        if reply is None:  # the client cut it (abort): the server dropped it with its tokens
            return GenerateResult(rid, [], [], "abort", [VersionSpan(version, 0, 0)], len(input_ids))
        result = parse_completion(reply, request_id=rid, prompt_len=len(input_ids), version=version, source=url)
        result.semantics = self.semantics
        result.extra["server"] = url
        return result

    def _check_sampling(self, sampling: SamplingParams) -> None:
        if self.semantics == LogprobSemantics.RAW and sampling.temperature not in (0.0, 1.0):
            raise EngineConfigError(
                f"temperature={sampling.temperature} but the vLLM server returns raw logprobs (temperature ignored), "
                "which are not the sampling distribution's; restart it with --logprobs-mode processed_logprobs or "
                "sample at temperature 1.0"
            )
        self._refuse_truncated(
            sampling,
            self.config.allow_truncated_sampling,
            "vLLM's processed logprobs are those of the truncated distribution, not the full-vocabulary ones the "
            "trainer recomputes",
        )

    async def abort(self, request_ids: list[str] | None = None) -> None:
        """Cut the requests meant and no other. vLLM pauses per server, not per request: a server whose every
        in-flight request is meant is paused with ``mode=abort`` (their ``generate`` returns the partial tokens);
        on a server that also runs other requests, the meant ones' HTTP calls are closed instead (vLLM aborts a
        request whose client left; its ``generate`` returns no token, ``finish_reason`` abort)."""
        meant = [r for r in self._inflight if request_ids is None or r in request_ids]
        if not meant:
            return
        servers = {self._inflight[r].url for r in meant}
        others = {e.url for r, e in self._inflight.items() if r not in meant}
        pause = [u for u in self.urls if u in servers - others]
        for rid in meant:
            if self._inflight[rid].url in others:
                self._cut(rid)
        if not pause:
            await self._wait_returned(meant, CONTROL_TIMEOUT_S)
            return
        self._pausing += 1  # nothing new reaches a server while it is paused to cut only the meant requests
        self._unpaused().clear()
        try:  # resume even when a pause failed part-way: a server left paused would hang every later request
            await asyncio.gather(*(self._control(u, "/pause", {"mode": "abort"}) for u in pause))
            await self._wait_returned(meant, CONTROL_TIMEOUT_S)
        finally:
            try:
                await asyncio.gather(*(self._control(u, "/resume") for u in pause))
            finally:
                self._pausing -= 1
                if not self._pausing:
                    self._unpaused().set()

    async def _control(self, url: str, path: str, params: dict[str, str] | None = None) -> Any:
        query = "?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else ""
        try:
            status, reply = await self.http.call("POST", url, path + query, None, CONTROL_TIMEOUT_S, retries=0)
        except ServerDown:
            if path == "/resume":
                raise
            return None  # a server that is down runs nothing to pause
        if status == 404:
            raise EngineConfigError(
                f"{url}{path} answered 404: start the vLLM server with VLLM_SERVER_DEV_MODE=1 (pause, abort and "
                "weight reloads are dev-mode routes)"
            )
        if status != 200:
            raise EngineError(f"vLLM server {url}{path}{query} failed (HTTP {status}): {error_text(reply)}")
        return reply

    async def update_weights(self, source: Mapping[str, Any] | str | Path, version: int) -> None:
        """Pause every server (``on_weight_update``: finish_old waits, abort cuts), reload from a directory (a
        state dict is written to ``engine.weights_dir`` first), set the version, resume."""
        if isinstance(source, Mapping):
            check_reloadable_state(source, self.model_path)  # before writing: a published dir has no config.json
            path = publish_state_dict(self.config.weights_dir, source, version, "vLLM")
        else:
            path = Path(source)
        check_reloadable(path)
        await self._probe_once()
        gate = self._gate()
        gate.clear()
        mode = "abort" if self.config.on_weight_update == "abort" else "wait"
        try:
            try:  # resume even when a pause or a reload failed part-way (see abort)
                await asyncio.gather(*(self._control(u, "/pause", {"mode": mode}) for u in self.urls))
                await asyncio.gather(*(self._reload(u, path, version) for u in self.urls))
                self._version = int(version)
            finally:
                await asyncio.gather(*(self._control(u, "/resume") for u in self.urls))
        finally:
            gate.set()

    async def _reload(self, url: str, path: Path, version: int) -> None:
        from agentrl.engines.vllm.probe import reload_weights

        await reload_weights(self.http, url, path.resolve(), version, max(self.config.request_timeout_s, 60.0))
