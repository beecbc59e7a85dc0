"""agentrl serve's OpenAI-compatible endpoints, spoken to by the official ``openai`` Python client."""

from __future__ import annotations

import math

import openai
import pytest
import torch
from engine_harness import ServedEngine, reference_logprobs

from agentrl.engines.base import GenerateResult, VersionSpan
from agentrl.openai_api.responses import chat_response

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        },
    }
]


def _client(served: ServedEngine) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_models_and_completions(served: ServedEngine) -> None:
    client = _client(served)
    [model] = client.models.list().data
    assert model.id == served.engine.model_path
    reply = client.completions.create(model=model.id, prompt="a b c", max_tokens=5, temperature=0, logprobs=1)
    choice = reply.choices[0]
    assert reply.usage.completion_tokens == len(choice.logprobs.tokens) == 5 and choice.finish_reason == "length"
    assert choice.logprobs.text_offset[0] == 0 and len(choice.logprobs.text_offset) == 5
    assert all(lp <= 0 for lp in choice.logprobs.token_logprobs)


def test_chat_renders_the_template_and_returns_the_sampled_tokens_logprobs(served: ServedEngine) -> None:
    client = _client(served)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    reply = client.chat.completions.create(
        model="any",
        messages=messages,
        max_tokens=8,
        temperature=1.0,
        logprobs=True,
        extra_body={"return_token_ids": True},
    )
    choice = reply.choices[0]
    ids = choice.model_extra["token_ids"]
    tokenizer = served.engine.tokenizer
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert reply.usage.prompt_tokens == len(prompt) and len(ids) == reply.usage.completion_tokens
    logprobs = [entry.logprob for entry in choice.logprobs.content]
    ref = reference_logprobs(served.engine.runner.model, prompt, ids, 1.0)  # the template's tokens, then the reply's
    assert (torch.tensor(logprobs) - ref).abs().max().item() <= 1e-4
    assert choice.message.role == "assistant" and choice.message.tool_calls is None


def test_bad_requests_are_openai_errors(served: ServedEngine) -> None:
    client = _client(served)
    with pytest.raises(openai.BadRequestError, match="presence_penalty"):
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], max_tokens=2, presence_penalty=0.5
        )
    with pytest.raises(openai.BadRequestError, match="messages must be"):
        client.chat.completions.create(model="m", messages=[], max_tokens=2)
    # one reading of request fields with the agent gateway (agentrl.openai_api.requests): refused, not ignored
    with pytest.raises(openai.BadRequestError, match="response_format.*constrained decoding"):
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "x"}],
            max_tokens=2,
            response_format={"type": "json_object"},
        )
    image = {"type": "image_url", "image_url": {"url": "http://x"}}
    with pytest.raises(openai.BadRequestError, match="'image_url' content part"):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": [image]}], max_tokens=2)


def test_hermes_tool_calls_become_tool_calls() -> None:
    """Response building on a fixed reply: the Hermes block the model wrote becomes ``message.tool_calls``."""
    from agentrl.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    text = 'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 2}}\n</tool_call>'
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    result = GenerateResult("r" * 32, ids, [-0.5] * len(ids), "stop", [VersionSpan(3, 0, len(ids))], prompt_tokens=9)
    reply = chat_response(result, tokenizer, "m", logprobs=True, tools=True, token_ids=False)
    [choice] = reply["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Let me add."
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"] == {"name": "add", "arguments": '{"a": 2}'}
    assert len(choice["logprobs"]["content"]) == len(ids) and reply["metadata"]["weight_version"] == "3"
    assert math.isclose(sum(e["logprob"] for e in choice["logprobs"]["content"]), -0.5 * len(ids))
    plain = chat_response(result, tokenizer, "m", logprobs=False, tools=False, token_ids=True)
    assert plain["choices"][0]["message"]["tool_calls"] is None and plain["choices"][0]["token_ids"] == ids


def test_tools_reach_the_chat_template(served: ServedEngine) -> None:
    """A request's tools are rendered into the prompt (the tiny template has no tool support: system prompt)."""
    client = _client(served)
    base = [{"role": "user", "content": "add 2"}]
    plain = client.chat.completions.create(model="m", messages=base, max_tokens=1, temperature=0)
    tooled = client.chat.completions.create(model="m", messages=base, max_tokens=1, temperature=0, tools=TOOLS)
    assert tooled.usage.prompt_tokens > plain.usage.prompt_tokens + 10


def test_streaming_chat_and_completions_read_by_the_openai_client(served: ServedEngine) -> None:
    client = _client(served)
    messages = [{"role": "user", "content": "Hi there"}]
    whole = client.chat.completions.create(model="m", messages=messages, max_tokens=6, temperature=0)
    stream = client.chat.completions.create(
        model="m", messages=messages, max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content and chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason] and chunks[-1].usage.completion_tokens == 6
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    plain = client.completions.create(model="m", prompt="a b c", max_tokens=5, temperature=0)
    pieces = list(client.completions.create(model="m", prompt="a b c", max_tokens=5, temperature=0, stream=True))
    assert "".join(p.choices[0].text for p in pieces) == plain.choices[0].text
    assert pieces[-1].choices[0].finish_reason == "length"
