"""``agentrl serve``'s OpenAI-compatible routes: /v1/models, /v1/completions, /v1/chat/completions.

Rendering and response building live in ``agentrl.openai_api`` (reusable by an agent gateway); these
handlers only join them to the engine. Errors answer 400 with OpenAI's ``{"error": {...}}`` shape.
``stream: true`` is answered with server-sent events once the reply is sampled (``agentrl.openai_api.streaming``:
the engine returns finished requests only), in the chunk shapes OpenAI sends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from agentrl.engines.embedded.engine import EmbeddedEngine
from agentrl.errors import EngineError
from agentrl.openai_api.render import RenderedRequest, render_chat, render_completion
from agentrl.openai_api.responses import chat_response, completion_response, error_body, models_response
from agentrl.openai_api.streaming import chat_stream_events, completion_stream_events, include_usage

Events = Callable[[dict[str, Any], bool], list[bytes]]


def add_openai_routes(app: web.Application, engine_key: web.AppKey[EmbeddedEngine]) -> None:
    """Mount the /v1 routes on ``app`` (the engine is read from ``app[engine_key]``)."""

    def engine_of(request: web.Request) -> EmbeddedEngine:
        return request.app[engine_key]

    async def models(request: web.Request) -> web.Response:
        return web.json_response(models_response(_model_name(engine_of(request))))

    async def completions(request: web.Request) -> web.StreamResponse:
        return await _serve(request, engine_of(request), render_completion, _completion_reply, completion_stream_events)

    async def chat(request: web.Request) -> web.StreamResponse:
        return await _serve(request, engine_of(request), render_chat, _chat_reply, chat_stream_events)

    app.add_routes(
        [
            web.get("/v1/models", models),
            web.post("/v1/completions", completions),
            web.post("/v1/chat/completions", chat),
        ]
    )


def _model_name(engine: EmbeddedEngine) -> str:
    return engine.model_path or "agentrl"


def _openai_error(message: str, status: int = 400) -> web.Response:
    return web.json_response(error_body(message, status), status=status)


async def _serve(
    request: web.Request,
    engine: EmbeddedEngine,
    render: Callable[[dict[str, Any], Any, int], RenderedRequest],
    reply: Callable[[Any, EmbeddedEngine, RenderedRequest, dict[str, Any]], dict[str, Any]],
    events: Events,
) -> web.StreamResponse:
    try:
        body = await request.json()
        if not isinstance(body, dict):
            raise EngineError("the request body must be a JSON object")
        rendered = render(body, engine.tokenizer, engine.max_seq_len)
        result = await engine.generate(rendered.input_ids, rendered.sampling)
    except (EngineError, ValueError) as exc:  # ValueError: a body that is not JSON, or an OpenAIRequestError
        return _openai_error(str(exc))
    answer = reply(result, engine, rendered, body)
    if not body.get("stream"):
        return web.json_response(answer)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    for event in events(answer, include_usage(body)):
        await response.write(event)
    await response.write_eof()
    return response


def _completion_reply(result: Any, engine: EmbeddedEngine, rendered: RenderedRequest, body: dict[str, Any]) -> Any:
    return completion_response(result, engine.tokenizer, _model_name(engine), logprobs=rendered.logprobs)


def _chat_reply(result: Any, engine: EmbeddedEngine, rendered: RenderedRequest, body: dict[str, Any]) -> Any:
    return chat_response(
        result,
        engine.tokenizer,
        _model_name(engine),
        logprobs=rendered.logprobs,
        tools=bool(rendered.tools),
        token_ids=bool(body.get("return_token_ids")),
    )
