"""Agent programs written against the official openai client, as a user would write them (the gateway's tests).

``calc_agent`` is a multi-turn tool-using loop: it offers a ``multiply`` tool, runs each tool call the model
makes, sends the result back as a ``tool`` message, and grades the final answer. ``forgetful_agent`` rewrites
its history (drops its earlier exchange) before the last call. Each agent keeps what it received in
``RECEIVED`` (by task id) so tests can compare the replies with what the gateway recorded.
"""

from __future__ import annotations

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
