"""SGLangEngine: the InferenceEngine protocol over one or many SGLang servers' native HTTP API.

Non-streaming ``/generate`` with ``input_ids`` + ``return_logprob``; ids are checked against the logprob
triples; a queued-abort reply or a missing logprob key means zero tokens. Connection errors and 5xx are
retried with backoff; a server that stays down raises EngineError naming its URL.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from agentrl.engines.base import GenerateResult, LogprobSemantics, ModelIdentity, SamplingParams, new_request_id
from agentrl.engines.sglang_config import SGLangEngineConfig
from agentrl.engines.sglang_wire import parse_reply, sampling_to_json, version_to_wire
from agentrl.engines.weight_dirs import publish_weights
from agentrl.errors import EngineConfigError, EngineError

_ABORT_WAIT_S = 10.0  # abort() re-sends until its targets return (an abort can race the request)
_CONTROL_TIMEOUT_S = 30.0


class SGLangEngine:
    """HTTP client for SGLang servers (or ``agentrl serve``, or an ``sglang-router`` URL)."""

    semantics = LogprobSemantics.TEMPERED_FULL_VOCAB

    def __init__(self, config: SGLangEngineConfig, *, model_path: str | None = None) -> None:
        if not config.urls:
            raise EngineConfigError(
                "engine.kind=sglang needs engine.urls, e.g. ['http://127.0.0.1:30000']; start a server with "
                "scripts/launch_sglang.sh"
            )
        self.config = config
        self.model_path = model_path  # what the servers serve (the run's model.path), for model_identity
        self.urls = [u.rstrip("/") for u in config.urls]
        self.server_info: dict[str, dict[str, Any]] = {}
        self._version = 0
        self._load = {u: 0 for u in self.urls}
        self._rr = itertools.cycle(self.urls)
        self._inflight: dict[str, tuple[str, asyncio.Event]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._probe_lock: asyncio.Lock | None = None

    @property
    def weight_version(self) -> int:
        """The version last set by ``update_weights`` (or reported by the servers at probe time)."""
        return self._version

    # --- HTTP plumbing -----------------------------------------------------------------------------
    def _http(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            # a session is bound to its event loop; tests and CLIs may run several loops in turn
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
            self._session_loop = loop
        return self._session

    async def _call(
        self, method: str, url: str, path: str, body: dict[str, Any] | None, timeout_s: float
    ) -> tuple[int, Any]:
        """One request with bounded retries on connection errors and 5xx; returns (status, body)."""
        attempts = self.config.max_retries + 1
        last: str = ""
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(min(0.1 * 2 ** (attempt - 1), 2.0))
            try:
                timeout = aiohttp.ClientTimeout(total=timeout_s)
                async with self._http().request(method, url + path, json=body, timeout=timeout) as resp:
                    text = await resp.text()
                    if resp.status >= 500:
                        last = f"HTTP {resp.status}: {text[:300]}"
                        continue
                    return resp.status, _maybe_json(text)
            except asyncio.TimeoutError as exc:
                raise EngineError(
                    f"SGLang server {url}{path} did not answer within {timeout_s:.0f} s (engine.request_timeout_s)"
                ) from exc
            except aiohttp.ClientError as exc:
                last = f"{type(exc).__name__}: {exc}"
        raise EngineError(
            f"SGLang server {url} failed {attempts} attempt(s) at {path}: {last}; is it running and reachable? (start "
            "one with scripts/launch_sglang.sh or `agentrl serve`)"
        )

    async def probe(self) -> dict[str, dict[str, Any]]:
        """Read every server's /server_info (once) and refuse logprob-breaking settings; returns the infos."""
        await self._probe()
        return dict(self.server_info)

    async def _probe(self) -> None:
        """Read /server_info of every server once; refuse settings that break training logprobs."""
        if self._probe_lock is None:
            self._probe_lock = asyncio.Lock()
        async with self._probe_lock:
            for url in self.urls:
                if url in self.server_info:
                    continue
                status, info = await self._call("GET", url, "/server_info", None, _CONTROL_TIMEOUT_S)
                if status == 404:  # SGLang < 0.5.10
                    status, info = await self._call("GET", url, "/get_server_info", None, _CONTROL_TIMEOUT_S)
                info = info if isinstance(info, dict) else {}
                check_server_semantics(url, info)
                self.server_info[url] = info

    def _pick(self) -> str:
        if self.config.routing == "round_robin":
            return next(self._rr)
        return min(self.urls, key=lambda u: self._load[u])

    # --- the protocol ------------------------------------------------------------------------------
    async def generate(
        self, input_ids: list[int], sampling: SamplingParams, request_id: str | None = None
    ) -> GenerateResult:
        """POST /generate (non-streaming, input_ids, return_logprob) to the least-loaded server."""
        self._check_sampling(sampling)
        if not input_ids:
            raise EngineError("input_ids is empty; send at least one prompt token")
        await self._probe()
        rid = request_id or new_request_id()
        url = self._pick()
        body = {
            "input_ids": list(input_ids),
            "sampling_params": sampling_to_json(sampling),
            "return_logprob": True,
            "rid": rid,
            "stream": False,
        }
        done = asyncio.Event()
        self._inflight[rid] = (url, done)
        self._load[url] += 1
        try:
            status, reply = await self._call("POST", url, "/generate", body, self.config.request_timeout_s)
        finally:
            self._load[url] -= 1
            self._inflight.pop(rid, None)
            done.set()
        if status != 200:
            raise EngineError(
                f"SGLang server {url}/generate rejected request {rid} (HTTP {status}): {_error_text(reply)}"
            )
        if isinstance(reply, list):
            reply = reply[0]
        result = parse_reply(reply, request_id=rid, prompt_len=len(input_ids), source=url)
        result.semantics = self.semantics
        result.extra["server"] = url
        return result

    def _check_sampling(self, sampling: SamplingParams) -> None:
        truncated = sampling.top_p < 1.0 or sampling.top_k > 0
        if truncated and sampling.temperature > 0 and not self.config.allow_truncated_sampling:
            raise EngineConfigError(
                f"top_p={sampling.top_p}, top_k={sampling.top_k}: SGLang's logprobs ignore top-p/top-k, so they would "
                "not be the behaviour "
                "logprobs the trainer needs; use top_p=1, top_k=-1 for training, or set "
                "engine.allow_truncated_sampling=true (eval only)"
            )

    async def abort(self, request_ids: list[str] | None = None) -> None:
        """Abort requests (None: all, on every server) and wait (bounded) until they have returned."""
        targets = list(self._inflight) if request_ids is None else [r for r in request_ids if r in self._inflight]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _ABORT_WAIT_S
        while True:
            if request_ids is None:
                await asyncio.gather(*(self._control(u, "/abort_request", {"abort_all": True}) for u in self.urls))
            else:
                await asyncio.gather(
                    *(
                        self._control(self._inflight[r][0], "/abort_request", {"rid": r})
                        for r in targets
                        if r in self._inflight
                    )
                )
            pending = [self._inflight[r][1] for r in targets if r in self._inflight]
            if not pending or loop.time() > deadline:
                return
            await asyncio.wait([asyncio.ensure_future(e.wait()) for e in pending], timeout=0.2)
            targets = [r for r in targets if r in self._inflight]
            if not targets:
                return

    async def _control(self, url: str, path: str, body: dict[str, Any]) -> Any:
        status, reply = await self._call("POST", url, path, body, _CONTROL_TIMEOUT_S)
        if status != 200:
            raise EngineError(f"SGLang server {url}{path} failed (HTTP {status}): {_error_text(reply)}")
        return reply

    async def update_weights(self, source: Mapping[str, Any] | str | Path, version: int) -> None:
        """Load new weights on every server as ``version``: a directory (or a state dict written to
        ``engine.weights_dir``) via /update_weights_from_disk, or tensors via /update_weights_from_tensor
        when ``engine.weight_sync == "tensor"`` (colocated, same host)."""
        body: dict[str, Any] = {
            "weight_version": version_to_wire(version),
            "abort_all_requests": self.config.weight_update == "abort",
        }
        if isinstance(source, Mapping) and self.config.weight_sync == "tensor":
            from agentrl.engines.tensor_wire import serialize_named_tensors

            route, what = "/update_weights_from_tensor", f"{len(source)} tensors"
            body["serialized_named_tensors"] = [await asyncio.to_thread(serialize_named_tensors, source)]
            body["flush_cache"] = True
        else:
            path = Path(source) if isinstance(source, (str, Path)) else self._write_state_dict(source, version)
            route, what = "/update_weights_from_disk", str(path)
            body["model_path"] = str(path.resolve())
        timeout = max(self.config.request_timeout_s, _CONTROL_TIMEOUT_S)
        replies = await asyncio.gather(*(self._call("POST", u, route, body, timeout) for u in self.urls))
        for url, (status, reply) in zip(self.urls, replies):
            if status != 200 or not (isinstance(reply, dict) and reply.get("success")):
                raise EngineError(
                    f"SGLang server {url} failed to load weights from {what} (HTTP {status}): {_error_text(reply)}"
                )
        self._version = int(version)

    def _write_state_dict(self, state: Mapping[str, Any], version: int) -> Path:
        """Save a state dict as safetensors under ``engine.weights_dir`` (servers must see the path)."""
        if not self.config.weights_dir:
            raise EngineConfigError(
                "update_weights got a state dict but engine.weights_dir is unset; set it to a directory the SGLang "
                "servers can read"
            )
        from safetensors.torch import save_file

        tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}  # clone: no shared storage
        return publish_weights(
            self.config.weights_dir, version, lambda d: save_file(tensors, str(d / "model.safetensors"))
        )

    def model_identity(self) -> ModelIdentity:
        """The model directory the run config names (the servers' own paths may differ); no config read here."""
        return ModelIdentity(path=self.model_path)

    async def health(self) -> bool:
        """True when every server answers /health with 200."""

        async def one(url: str) -> bool:
            try:
                status, _ = await self._call("GET", url, "/health", None, _CONTROL_TIMEOUT_S)
            except EngineError:
                return False
            return status == 200

        return all(await asyncio.gather(*(one(u) for u in self.urls)))

    async def close(self) -> None:
        """Close the HTTP session (idempotent)."""
        if self._session is not None and not self._session.closed:
            await self._session.close()


def check_server_semantics(url: str, info: dict[str, Any]) -> None:
    """Raise EngineConfigError when a server's logprobs are not log_softmax(logits / T) of the sample."""
    semantics = info.get("logprob_semantics", LogprobSemantics.TEMPERED_FULL_VOCAB.value)
    original = info.get("return_original_logprob") or _truthy(os.environ.get("SGLANG_RETURN_ORIGINAL_LOGPROB"))
    if original or semantics == LogprobSemantics.RAW.value:
        raise EngineConfigError(
            f"SGLang server {url} returns logprobs before temperature (SGLANG_RETURN_ORIGINAL_LOGPROB); unset it and "
            "restart the server, the trainer needs log_softmax(logits / T)"
        )
    if semantics != LogprobSemantics.TEMPERED_FULL_VOCAB.value:
        raise EngineConfigError(
            f"SGLang server {url} reports logprob semantics {semantics!r}; training needs 'tempered_full_vocab'"
        )


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _maybe_json(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return text


def _error_text(reply: Any) -> str:
    if isinstance(reply, dict):
        err = reply.get("error", reply.get("message", reply))
        return str(err.get("message", err) if isinstance(err, dict) else err)[:500]
    return str(reply)[:500]
