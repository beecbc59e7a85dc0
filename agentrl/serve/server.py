"""``agentrl serve``: the embedded engine behind SGLang's native HTTP API subset (aiohttp).

Same routes and JSON shapes as SGLang 0.5.x (docs/engines.md#sglangs-generate-api), so ``SGLangEngine`` is tested end to
end against a real server: /generate (single and batched), /abort_request (rid prefix, abort_all),
/update_weights_from_disk|tensor (tensor inside /begin_weight_update ... /end_weight_update), /flush_cache,
/health, /health_generate, /model_info, /server_info, and
the OpenAI-compatible /v1/models, /v1/completions, /v1/chat/completions (``openai_routes.py``).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web

import agentrl
from agentrl.engines.base import GenerateResult, new_request_id
from agentrl.engines.embedded.engine import EmbeddedEngine
from agentrl.engines.sglang.wire import reply_json, sampling_from_json, version_from_wire, version_to_wire
from agentrl.engines.tensor_wire import deserialize_named_tensors
from agentrl.errors import EngineError
from agentrl.serve.openai_routes import add_openai_routes

ENGINE_KEY = web.AppKey("engine", EmbeddedEngine)
LAUNCH_VERSION_KEY = web.AppKey("launch_weight_version", str)  # /server_info reports the launch value, as SGLang
# SGLang 0.5.23's weight-update session: tensor updates only between /begin_weight_update and /end_weight_update
SESSION_KEY = web.AppKey("weight_update_session", list)


def create_app(engine: EmbeddedEngine) -> web.Application:
    """An aiohttp application serving ``engine``; the caller owns the engine's lifetime."""
    app = web.Application(client_max_size=64 * 1024**2)
    app[ENGINE_KEY] = engine
    app[LAUNCH_VERSION_KEY] = version_to_wire(engine.weight_version)
    app[SESSION_KEY] = []  # [] closed, [True] open (a mutable box: the app's own keys are frozen once started)
    app.add_routes(
        [
            web.post("/generate", _generate),
            web.put("/generate", _generate),
            web.post("/abort_request", _abort),
            web.post("/update_weights_from_disk", _update_from_disk),
            web.post("/update_weights_from_tensor", _update_from_tensor),
            web.post("/begin_weight_update", _begin_weight_update),
            web.post("/end_weight_update", _end_weight_update),
            web.route("*", "/flush_cache", _flush_cache),
            web.get("/health", _health),
            web.get("/health_generate", _health),
            web.get("/model_info", _model_info),
            web.get("/get_model_info", _model_info),
            web.get("/server_info", _server_info),
            web.get("/get_server_info", _server_info),
        ]
    )
    add_openai_routes(app, ENGINE_KEY)
    return app


def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


async def _read_json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EngineError(f"request body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise EngineError("request body must be a JSON object")
    return body


def _as_batch(body: dict[str, Any], engine: EmbeddedEngine) -> tuple[bool, list[list[int]]]:
    """(is_batch, prompts) from ``input_ids`` (or ``text``, tokenized here)."""
    if body.get("input_ids") is not None:
        ids = body["input_ids"]
    elif body.get("text") is not None:
        texts = body["text"]
        encode = lambda t: engine.tokenizer.encode(t, add_special_tokens=False)  # noqa: E731
        ids = [encode(t) for t in texts] if isinstance(texts, list) else encode(texts)
    else:
        raise EngineError("give input_ids (or text) in the /generate body")
    if not isinstance(ids, list):
        raise EngineError(f"input_ids must be a list of ints or a list of lists, got {type(ids).__name__}")
    if ids and all(isinstance(x, list) for x in ids):
        return True, ids
    if all(isinstance(x, int) for x in ids):
        return False, [ids]
    raise EngineError("input_ids must be a list of ints or a list of lists of ints")


def _per_item(value: Any, n: int, name: str, batch: bool) -> list[Any]:
    if batch and isinstance(value, list):
        if len(value) != n:
            raise EngineError(f"{name} has {len(value)} entries for a batch of {n}")
        return value
    return [value] * n


async def _generate(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    started = time.monotonic()
    try:
        body = await _read_json(request)
        batch, prompts = _as_batch(body, engine)
        if body.get("stream") and batch:
            raise EngineError("stream=true with a batch is not supported by agentrl serve; send one prompt per request")
        params = [
            sampling_from_json(p)
            for p in _per_item(body.get("sampling_params"), len(prompts), "sampling_params", batch)
        ]
        rids = body.get("rid")
        rids = _per_item(rids, len(prompts), "rid", batch) if rids is not None else [new_request_id() for _ in prompts]
        if batch and len(set(rids)) != len(rids):
            raise EngineError("rid values must be unique within a batch")
    except EngineError as exc:
        return _error(str(exc))
    tasks = [asyncio.ensure_future(engine.generate(p, s, r)) for p, s, r in zip(prompts, params, rids)]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except asyncio.CancelledError:  # the client went away: its requests are aborted (engine.generate)
        for task in tasks:
            task.cancel()
        raise
    failed = [t.exception() for t in tasks if t.done() and t.exception() is not None]
    if failed:  # one bad item fails the batch: stop its siblings and wait for them to return
        await engine.abort(list(rids))
        await asyncio.gather(*tasks, return_exceptions=True)
        return _error(str(failed[0]))
    results = [t.result() for t in tasks]
    latency = time.monotonic() - started
    want_logprob = bool(body.get("return_logprob"))
    replies = [reply_json(r, return_logprob=want_logprob, text=_text(engine, r), latency_s=latency) for r in results]
    if body.get("stream"):
        return await _stream_once(request, replies[0])
    return web.json_response(replies if batch else replies[0])


async def _stream_once(request: web.Request, reply: dict[str, Any]) -> web.StreamResponse:
    """SGLang's SSE framing (``data: <json>``, then ``data: [DONE]``) with the whole reply as its one chunk: the
    engine returns finished requests only, so a streaming client (SGLang's benchmark client by default) works
    but sees the first token when the last one arrives (its TTFT is the request's latency)."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    await response.write(b"data: " + json.dumps(reply).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def _text(engine: EmbeddedEngine, result: GenerateResult) -> str:
    return engine.tokenizer.decode(result.output_ids, skip_special_tokens=True) if result.output_ids else ""


async def _abort(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    try:
        body = await _read_json(request)
    except EngineError as exc:
        return _error(str(exc))
    if body.get("abort_all"):
        await engine.abort(None)
    elif body.get("rid"):
        prefix = str(body["rid"])  # SGLang matches rids by prefix
        await engine.abort([rid for rid in engine.active_request_ids() if rid.startswith(prefix)])
    return web.Response(status=200)


async def _update_from_disk(request: web.Request) -> web.Response:
    return await _update(request, "model_path")


async def _update_from_tensor(request: web.Request) -> web.Response:
    if not request.app[SESSION_KEY]:  # SGLang's refusal, word for word
        message = "update_weights_from_tensor must run between begin_weight_update() and end_weight_update()"
        return web.json_response({"success": False, "message": message}, status=400)
    return await _update(request, "serialized_named_tensors")


async def _begin_weight_update(request: web.Request) -> web.Response:
    session = request.app[SESSION_KEY]
    if session:
        message = "a weight-update session is already open; call end_weight_update() first"
        return web.json_response({"success": False, "message": message}, status=400)
    session.append(True)
    return web.json_response({"success": True, "message": "Success"})


async def _end_weight_update(request: web.Request) -> web.Response:
    session = request.app[SESSION_KEY]
    if not session:
        message = "no weight-update session is open; call begin_weight_update() first"
        return web.json_response({"success": False, "message": message}, status=400)
    session.clear()
    return web.json_response({"success": True, "message": "Success"})


async def _update(request: web.Request, source_key: str) -> web.Response:
    """Both weight-update routes: load the source, optionally abort everything, swap, set the version."""
    engine = request.app[ENGINE_KEY]
    try:
        body = await _read_json(request)
        raw = body.get(source_key)
        if not raw:
            raise EngineError(f"{source_key} is required")
        if source_key == "model_path":
            source: Any = str(raw)
        elif not isinstance(raw, list) or len(raw) != 1:
            raise EngineError(
                f"serialized_named_tensors must be a list with one payload per TP rank; this server has tp_size 1, "
                f"got {len(raw) if isinstance(raw, list) else type(raw).__name__}"
            )
        else:
            source = await asyncio.to_thread(deserialize_named_tensors, raw[0])
        wire = body.get("weight_version")
        version = version_from_wire(wire) if wire is not None else engine.weight_version + 1
        if body.get("abort_all_requests"):
            await engine.abort(None)
        await engine.update_weights(source, version)
    except EngineError as exc:
        return web.json_response({"success": False, "message": str(exc), "num_paused_requests": 0}, status=400)
    return web.json_response(
        {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}
    )


async def _flush_cache(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    if engine.active_request_ids():
        return web.Response(status=400, text="Cache not flushed: requests are running.")
    engine.flush_cache()
    return web.Response(status=200, text="Cache flushed.\n")


async def _health(request: web.Request) -> web.Response:
    ok = await request.app[ENGINE_KEY].health()
    return web.Response(status=200 if ok else 503)


async def _model_info(request: web.Request) -> web.Response:
    engine = request.app[ENGINE_KEY]
    return web.json_response(
        {
            "model_path": engine.model_path,
            "tokenizer_path": engine.model_path,
            "served_model_name": engine.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": version_to_wire(engine.weight_version),
            "load_format": "auto",
        }
    )


async def _server_info(request: web.Request) -> web.Response:
    """SGLang 0.5.x's shape (``srt/entrypoints/http_server.py``, ``server_info``): the resolved server
    arguments one key per ``ServerArgs`` field (those agentrl serve has), ``internal_states`` and ``version``."""
    engine = request.app[ENGINE_KEY]
    return web.json_response(
        {
            "model_path": engine.model_path,
            "tokenizer_path": engine.model_path,
            "served_model_name": engine.model_path,
            "context_length": engine.max_seq_len,
            "max_running_requests": engine.config.max_batch_size,
            "tp_size": 1,
            "dp_size": 1,
            "pp_size": 1,
            "skip_tokenizer_init": False,
            "weight_version": request.app[LAUNCH_VERSION_KEY],
            "enable_deterministic_inference": False,
            "rl_on_policy_target": None,
            "disable_radix_cache": engine.config.prefix_cache_tokens == 0,
            "internal_states": [engine.load()],
            "version": f"agentrl-serve-{getattr(agentrl, '__version__', '0')}",
        }
    )


def make_runner(engine: EmbeddedEngine) -> web.AppRunner:
    """An AppRunner whose handlers are cancelled when the client disconnects: like SGLang, a dropped
    /generate connection aborts its request instead of decoding for nobody."""
    return web.AppRunner(create_app(engine), access_log=None, handler_cancellation=True, shutdown_timeout=5.0)


async def serve(engine: EmbeddedEngine, host: str, port: int) -> None:
    """Serve until cancelled (Ctrl-C); closes the engine on the way out."""
    runner = make_runner(engine)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    print(f"agentrl serve: {engine.model_path} on http://{host}:{port}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        await engine.close()
