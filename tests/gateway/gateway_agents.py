"""Agent programs written against the official openai client, as a user would write them (the gateway's tests).

``calc_agent`` is a multi-turn tool-using loop: it offers a ``multiply`` tool, runs each tool call the model
makes, sends the result back as a ``tool`` message, and grades the final answer. ``forgetful_agent`` rewrites
its history (drops its earlier exchange) before the last call. Each agent keeps what it received in
``RECEIVED`` (by task id) so tests can compare the replies with what the gateway recorded.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "multiply",
            "description": "Multiply two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]
SYSTEM = "You are a calculator agent. Call multiply, then reply with the number only."
RECEIVED: dict[str, list[Any]] = {}


def multiply(a: int, b: int) -> int:
    """The agent's own tool."""
    return a * b


def run_tool(call: Any) -> str:
    try:
        args = json.loads(call.function.arguments)
        return str(multiply(**args)) if call.function.name == "multiply" else f"Error: no tool {call.function.name}"
    except (TypeError, ValueError) as exc:
        return f"Error: {exc}"


async def calc_agent(client: Any, task: dict[str, Any]) -> float:
    """Ask, run the model's tool calls, answer; reward 1 for the right number."""
    messages: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["question"]}]
    received = RECEIVED.setdefault(task["task_id"], [])
    for _ in range(task.get("max_calls", 3)):
        reply = await client.chat.completions.create(
            model="policy", messages=messages, tools=TOOLS, max_tokens=40, logprobs=True, temperature=0.7
        )
        received.append(reply)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return float((message.content or "").strip() == str(task["answer"]))
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": run_tool(call)})
    return 0.0


async def forgetful_agent(client: Any, task: dict[str, Any]) -> dict[str, Any]:
    """Two calls, then a third that keeps only the system prompt and a fresh question (a rewrite)."""
    messages: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["question"]}]
    for _ in range(2):
        reply = await client.chat.completions.create(model="policy", messages=messages, max_tokens=12)
        messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Again."}]
    messages = [messages[0], {"role": "user", "content": "Start over: " + task["question"]}]
    await client.chat.completions.create(model="policy", messages=messages, max_tokens=12)
    return {"reward": 0.5, "reward_components": {"tried": 0.5}}


def plain_agent(client: Any, task: dict[str, Any]) -> bool:
    """A blocking (plain def) agent with the synchronous client: one call."""
    reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": task["question"]}])
    return bool(reply.choices[0].message.content is not None)


async def streaming_agent(client: Any, task: dict[str, Any]) -> float:
    """One streamed call (stream=True, usage included), reassembled the way SDKs do."""
    stream = await client.chat.completions.create(
        model="policy",
        messages=[{"role": "user", "content": task["question"]}],
        max_tokens=16,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage, finish = "", None, None
    async for chunk in stream:
        usage = chunk.usage or usage
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    RECEIVED.setdefault(task["task_id"], []).append((text, usage, finish))
    return 1.0


async def failing_agent(client: Any, task: dict[str, Any]) -> float:
    """Calls the model once, then raises."""
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    raise ValueError(f"boom on {task['task_id']}")


async def silent_agent(client: Any, task: dict[str, Any]) -> float:
    """Never calls the model."""
    return 1.0


async def wordy_agent(client: Any, task: dict[str, Any]) -> str:
    """Returns a string where a reward belongs."""
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    return "great job"


async def chatty_agent(client: Any, task: dict[str, Any]) -> float:
    """``task['calls']`` plain calls of ``task['max_tokens']`` tokens each, one user message between them."""
    messages: list[Any] = [{"role": "user", "content": task["question"]}]
    received = RECEIVED.setdefault(task["task_id"], [])
    for k in range(task["calls"]):
        reply = await client.chat.completions.create(
            model="policy", messages=messages, max_tokens=task["max_tokens"], logprobs=True
        )
        received.append(reply)
        messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": f"more {k}"}]
    return float(len(messages))


async def probing_agent(client: Any, task: dict[str, Any]) -> dict[str, Any]:
    """Exercises the gateway's HTTP surface the way a careless agent would; records what it got."""
    import httpx
    import openai

    seen: dict[str, Any] = RECEIVED.setdefault(task["task_id"], {})  # type: ignore[assignment]
    ask = [{"role": "user", "content": task["question"]}]
    for name, extra in [("n", {"n": 2}), ("prefill", {"messages": [*ask, {"role": "assistant", "content": "Sure"}]})]:
        try:
            await client.chat.completions.create(**{"model": "policy", "messages": ask, **extra})
        except openai.BadRequestError as exc:
            seen[name] = exc.message
    seen["models"] = [m.id async for m in client.models.list()]
    base, key = str(client.base_url).rstrip("/"), client.api_key
    async with httpx.AsyncClient() as http:
        completions = await http.post(f"{base}/completions", json={}, headers={"Authorization": f"Bearer {key}"})
        wrong_key = await http.get(f"{base}/models", headers={"Authorization": "Bearer nope"})
        other = await http.get(base.rsplit("/ep/", 1)[0] + "/ep/0123/v1/models")
    seen["http"] = [(r.status_code, r.json()["error"]["message"]) for r in (completions, wrong_key, other)]
    once = client.with_options(max_retries=0)
    first, again = await asyncio.gather(*[once.chat.completions.create(model="p", messages=ask) for _ in range(2)])
    seen["retry_joined"] = first.id == again.id and first.choices[0].message.content == "hello"
    follow = [*ask, first.choices[0].message.model_dump(exclude_none=True)]

    async def race(word: str) -> Any:
        try:
            return await once.chat.completions.create(model="p", messages=[*follow, {"role": "user", "content": word}])
        except openai.ConflictError as exc:  # the other one is in flight: this one is refused at once
            seen["conflict"] = exc.message
            return None

    seen["race"] = [r for r in await asyncio.gather(race("x"), race("y")) if r is not None]
    return {"reward": 1.0, "success": True}


async def sleepy_agent(client: Any, task: dict[str, Any]) -> float:
    """One call, then hangs (a stuck tool)."""
    await client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    await asyncio.sleep(3600)
    return 0.0


async def parity_agent(client: Any, task: dict[str, Any]) -> float:
    """Two calls, the first reply's length reported back in between; reward: the replies' total length mod 7, / 6."""
    messages: list[Any] = [{"role": "user", "content": task["question"]}]
    total = 0
    for k in range(2):
        reply = await client.chat.completions.create(model="policy", messages=messages, max_tokens=16)
        text = reply.choices[0].message.content or ""
        total += len(text)
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"{len(text)} chars; {k}"}]
    return (total % 7) / 6
