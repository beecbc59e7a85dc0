"""VLLMEngine: the InferenceEngine protocol over vLLM OpenAI-compatible servers.

Generation is non-streaming ``/v1/completions`` with token-id prompts (``vllm.wire``). Aborts and weight
updates use the server's dev-mode routes (``VLLM_SERVER_DEV_MODE=1``): ``POST /pause?mode=abort`` ends
every running request, which returns its partial tokens with ``finish_reason: "abort"``, then
``/resume``. vLLM aborts per server, not per request, so a server must serve one agentrl run.

Policy versions are the client's: an update pauses each server (``mode=wait`` finishes running requests
under the old weights, ``mode=abort`` cuts them), reloads, and resumes, and no request is sent while an
update runs. So a request's tokens all come from the version in effect when it was sent, and each
server's ``/v1/weight_version`` (set after every reload) is checked at start-up and after each update.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentrl.engines.base import GenerateResult, LogprobSemantics, SamplingParams, new_request_id
from agentrl.engines.http_base import CONTROL_TIMEOUT_S, HttpEngineBase, HttpTransport, ServerDown, error_text
from agentrl.engines.routing import ServerPicker
from agentrl.engines.vllm.config import VLLMEngineConfig
from agentrl.engines.vllm.probe import check_logprob_semantics, check_reloadable, served_model
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
        self._probed = False

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
            lines.append(f"engine vllm: {url} serves {name!r}")
            semantics, line = await check_logprob_semantics(self.http, url, name)
            if semantics != LogprobSemantics.TEMPERED_FULL_VOCAB:
                self.semantics = semantics  # any raw server makes the whole engine raw
            lines.append(f"engine vllm: {url} {line}")
            lines.append(f"engine vllm: {url} {await self._check_dev_mode(url)}")
        self._probed = True
        return lines

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
        if not self._probed:
            await self.probe()
        self._check_sampling(sampling)  # after the probe: it measures whether logprobs are tempered
        await self._gate().wait()  # never send while a weight update runs: its version would be ambiguous
        rid = request_id or new_request_id()
        assert self.model_name is not None  # set by probe
        body = completion_body(self.model_name, input_ids, sampling, rid)
        version = self._version
        async with self._sending(rid, input_ids) as url:
            reply = await self._post(url, "/v1/completions", body, self.config.request_timeout_s, rid)
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
        """Cut running requests (their ``generate`` returns the partial tokens). vLLM pauses per server, so
        every request in flight is cut, not only ``request_ids``: one server serves one run."""
        if request_ids is not None and not any(r in self._inflight for r in request_ids):
            return
        pending = [r for r in self._inflight if request_ids is None or r in request_ids]
        try:  # resume even when a pause failed part-way: a server left paused would hang every later request
            await asyncio.gather(*(self._control(u, "/pause", {"mode": "abort"}) for u in self.urls))
            await self._wait_returned(pending, CONTROL_TIMEOUT_S)
        finally:
            await asyncio.gather(*(self._control(u, "/resume") for u in self.urls))

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
        """Pause every server (``weight_update``: finish_old waits, abort cuts), reload from a directory (a
        state dict is written to ``engine.weights_dir`` first), set the version, resume."""
        path = (
            Path(source)
            if isinstance(source, (str, Path))
            else publish_state_dict(self.config.weights_dir, source, version, "vLLM")
        )
        check_reloadable(path)
        if not self._probed:
            await self.probe()
        gate = self._gate()
        gate.clear()
        mode = "abort" if self.config.weight_update == "abort" else "wait"
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
