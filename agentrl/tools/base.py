"""Tools: typed Python functions with docstrings, their JSON schemas, and execution of the calls in a model's text.

A tool's schema is derived from its signature with pydantic; executing the calls found in a
model's text (``execute_tool_calls``) never raises: bad calls become tool messages that say what
to fix. How schemas reach the prompt is chat assembly's job (``agentrl.chat``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, PydanticUserError, TypeAdapter, ValidationError, create_model

from agentrl.chat import template_supports_tools, tools_system_prompt, with_tools_prompt
from agentrl.chat.messages import Message, tool
from agentrl.errors import ConfigError, ToolCallError, did_you_mean
from agentrl.tools.toolcall import parse_tool_calls

# The chat-template helpers live with chat assembly (agentrl.chat); importable from here as before.
__all__ = [
    "Tool",
    "ToolDocWarning",
    "as_tool",
    "execute_tool_calls",
    "run_tool_call",
    "template_supports_tools",
    "tools_system_prompt",
    "with_tools_prompt",
]


class ToolDocWarning(UserWarning):
    """A tool's docstring documents something its signature does not have (the model would read a stale hint)."""


_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_ARG_HEADERS = {"args", "arguments", "parameters"}
_OTHER_HEADERS = {"returns", "raises", "yields", "example", "examples", "note", "notes"}


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {argument: description})."""
    description: list[str] = []
    arg_docs: dict[str, str] = {}
    section, current = "description", ""
    for line in inspect.cleandoc(doc).splitlines():
        stripped = line.strip()
        header = stripped[:-1].lower() if stripped.endswith(":") else ""
        if header in _ARG_HEADERS or header in _OTHER_HEADERS:
            section = "args" if header in _ARG_HEADERS else "other"
            continue
        if section == "description":
            description.append(stripped)
            continue
        indent = len(line) - len(line.lstrip())
        match = _ARG_LINE.match(stripped)
        if section == "args" and match and indent <= 4:  # "name (type): text" opens an argument
            current = match.group(1).lstrip("*")
            arg_docs[current] = match.group(2).strip()
        elif section == "args" and current and stripped:  # deeper-indented continuation line
            arg_docs[current] = f"{arg_docs[current]} {stripped}".strip()
    return " ".join(" ".join(description).split()), arg_docs


def _strip_titles(schema: Any) -> Any:
    """pydantic adds a ``title`` to every property; models read better without them."""
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


@dataclass(frozen=True)
class Tool:
    """A callable tool: name, description, pydantic arguments model and the function itself."""

    name: str
    description: str
    fn: Callable[..., Any]
    arguments_model: type[BaseModel]

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI/Qwen function schema: ``{"type": "function", "function": {...}}``."""
        parameters = _strip_titles(self.arguments_model.model_json_schema())
        parameters.setdefault("properties", {})
        parameters.setdefault("required", [])
        parameters.pop("additionalProperties", None)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }

    def call(self, arguments: dict[str, Any]) -> Any:
        """Validate ``arguments`` against the signature and call the function; ToolCallError on bad arguments."""
        try:
            validated = self.arguments_model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg'].lower()}" for err in exc.errors()
            )
            expected = ", ".join(self.schema["function"]["parameters"]["properties"]) or "no arguments"
            raise ToolCallError(f"invalid arguments for tool {self.name!r}: {problems} (expected: {expected})") from exc
        result = self.fn(**{name: getattr(validated, name) for name in type(validated).model_fields})
        if inspect.iscoroutine(result):  # async tools run to completion here: env.step is synchronous
            result = asyncio.run(result)
        return result


def as_tool(fn: Callable[..., Any] | Tool, *, name: str | None = None) -> Tool:
    """Build a ``Tool`` from a typed function with a docstring (ConfigError names what is missing)."""
    if isinstance(fn, Tool):
        return fn
    tool_name = name or getattr(fn, "__name__", "")
    if not callable(fn) or not tool_name.isidentifier():
        raise ConfigError(f"tool {fn!r} must be a named Python function; pass a def with type hints and a docstring")
    if not inspect.getdoc(fn):
        raise ConfigError(
            f"tool {tool_name!r} has no docstring; add one: its first line becomes the tool description the model reads"
        )
    description, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigError(
                f"tool {tool_name!r} takes *{param.name}; tools need named parameters so a schema can describe them"
            )
        if param.name not in hints:
            raise ConfigError(
                f"tool {tool_name!r} parameter {param.name!r} has no type hint; annotate it (e.g. {param.name}: str)"
            )
        _check_describable(tool_name, param.name, hints[param.name])
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hints[param.name], Field(default, description=arg_docs.get(param.name)))
    stale = [name for name in arg_docs if name not in fields]
    if stale:
        warnings.warn(
            f"tool {tool_name!r}: its docstring's Args: documents {', '.join(map(repr, stale))}, which "
            f"{'is not a parameter' if len(stale) == 1 else 'are not parameters'} (parameters: "
            f"{', '.join(fields) or 'none'}); rename or remove the entry, the model never sees it",
            ToolDocWarning,
            stacklevel=2,
        )
    model = create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    return Tool(name=tool_name, description=description, fn=fn, arguments_model=model)


def _check_describable(tool_name: str, param: str, annotation: Any) -> None:
    """ConfigError, in one line naming the tool and the parameter, when no JSON schema can describe its type."""
    try:
        TypeAdapter(annotation).json_schema()
    except (PydanticUserError, TypeError, ValueError) as exc:
        shown = getattr(annotation, "__name__", None) or repr(annotation)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0].split(". ")[0]  # pydantic's fix misleads
        raise ConfigError(
            f"tool {tool_name!r} parameter {param!r} is typed {shown}, which has no JSON schema for the model to "
            f"read ({first}); type it str, int, float, bool, a Literal or Enum, a list or dict of those, or a "
            "pydantic BaseModel, and build your own object from that inside the tool"
        ) from None


def _result_text(result: Any, max_chars: int) -> str:
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
    if len(text) > max_chars:
        text = f"{text[:max_chars]}\n[... output truncated: {len(text) - max_chars} more characters]"
    return text


def run_tool_call(name: str, arguments: dict[str, Any], tools: dict[str, Tool], *, max_chars: int = 10_000) -> str:
    """Execute one call and return the text for the model; errors become ``Error: ...`` text."""
    if name not in tools:
        available = ", ".join(sorted(tools)) or "none"
        return f"Error: unknown tool {name!r}.{did_you_mean(name, tools)} Available tools: {available}."
    try:
        return _result_text(tools[name].call(arguments), max_chars)
    except ToolCallError as exc:
        return f"Error: {exc}"
    except Exception as exc:  # noqa: BLE001 - a failing tool is feedback for the model, never a crashed rollout
        return f"Error: tool {name!r} raised {type(exc).__name__}: {exc}"


def execute_tool_calls(
    text: str, tools: Sequence[Callable[..., Any] | Tool], *, max_chars: int = 10_000
) -> list[Message]:
    """Run every ``<tool_call>`` in ``text``; returns one tool message per call (errors included), [] if none."""
    by_name = {t.name: t for t in map(as_tool, tools)}
    messages: list[Message] = []
    for call in parse_tool_calls(text):
        if call.error is not None:
            messages.append(tool(f"Error: {call.error}", name=call.name or None))
            continue
        messages.append(tool(run_tool_call(call.name, call.arguments, by_name, max_chars=max_chars), name=call.name))
    return messages
