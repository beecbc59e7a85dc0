"""Parse Qwen/Hermes tool calls (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``) from model text.

Parsing never raises: a malformed call becomes a ``ToolCall`` with ``error`` set to a message the
model can read and fix (what was wrong, where, and the expected shape).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
EXPECTED_SHAPE = '<tool_call>\n{"name": "<tool name>", "arguments": {<argument name>: <value>, ...}}\n</tool_call>'

# A block runs to its closing tag, or to the next opening tag / end of text when the model
# forgot to close it (generation often stops right before a closing tag).
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL)


@dataclass
class ToolCall:
    """One parsed tool call; ``error`` is set (and name/arguments may be empty) when it was malformed."""

    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str = ""
    error: str | None = None
    closed: bool = True

    @property
    def ok(self) -> bool:
        """True when the call parsed into a name and an arguments object."""
        return self.error is None


def _json_error(body: str, exc: json.JSONDecodeError) -> str:
    start = max(0, exc.pos - 20)
    excerpt = body[start : exc.pos + 20].replace("\n", "\\n")
    return f"the tool call is not valid JSON ({exc.msg} at character {exc.pos}, near {excerpt!r})"


def _arguments_of(payload: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    arguments = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):  # some models emit the arguments object as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return None, f'"arguments" is a string that is not a JSON object ({exc.msg})'
    if not isinstance(arguments, dict):
        return None, f'"arguments" must be a JSON object, got {type(arguments).__name__} {arguments!r}'
    return arguments, None


def parse_one(body: str, *, closed: bool = True) -> ToolCall:
    """Parse the JSON between ``<tool_call>`` tags into a ``ToolCall`` (error set when malformed)."""
    raw = body.strip()
    call = ToolCall(raw=raw, closed=closed)
    if not raw:
        call.error = "the tool call is empty"
        return call
    try:
        payload = json.loads(raw)
    except json.JSONDecodeError as exc:
        call.error = _json_error(raw, exc)
        return call
    if not isinstance(payload, dict):
        call.error = f"the tool call must be a JSON object, got {type(payload).__name__}"
        return call
    name = payload.get("name")
    if not isinstance(name, str) or not name.strip():
        call.error = 'the tool call has no "name" string'
        return call
    call.name = name.strip()
    arguments, problem = _arguments_of(payload)
    if problem is not None:
        call.error = problem
        return call
    call.arguments = arguments or {}
    return call


def parse_tool_calls(text: str) -> list[ToolCall]:
    """All tool calls in ``text`` in order ([] when there is none); malformed ones carry ``error``."""
    calls: list[ToolCall] = []
    for match in _BLOCK.finditer(text):
        call = parse_one(match.group(1), closed=match.group(0).endswith(CLOSE_TAG))
        if call.error is not None:
            call.error = f"{call.error}. Write each call as:\n{EXPECTED_SHAPE}"
        calls.append(call)
    return calls


def has_tool_call(text: str) -> bool:
    """True when ``text`` contains at least one ``<tool_call>`` opening tag."""
    return OPEN_TAG in text


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """Render a call in the format the parser reads (for scripted policies and tests)."""
    return f"{OPEN_TAG}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{CLOSE_TAG}"
