"""Turn the assistant's text into one code-exec action: run a cell, submit a solution, or nothing.

Protocol (simplest first, for small models): a fenced ```python block that defines the entry-point
function is the submission; any other python block, or a ``run_python`` tool call, runs in the
stateful sandbox session; a ``submit`` tool call submits explicitly. A malformed tool call is an
``invalid`` action whose message tells the model how to fix it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from agentrl.tools.toolcall import has_tool_call, parse_tool_calls

# A python block may be left unclosed when generation stops on the closing fence.
_FENCE = re.compile(r"```(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
ActionKind = Literal["run", "submit", "invalid", "none"]


@dataclass(frozen=True)
class CodeAction:
    """What one assistant turn asks for; ``code`` is the cell or solution, ``error`` an invalid call's message."""

    kind: ActionKind
    code: str = ""
    via_tool: bool = False
    error: str = ""


def defines_function(code: str, name: str) -> bool:
    """True when ``code`` has a top-level ``def name(`` (the submission signal)."""
    return re.search(rf"^(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def python_blocks(text: str) -> list[str]:
    """Contents of the fenced code blocks in ``text`` (untagged blocks count as python)."""
    return [match.group(1) for match in _FENCE.finditer(text) if match.group(1).strip()]


def _from_tool_call(text: str) -> CodeAction:
    calls = parse_tool_calls(text)
    call = calls[0]
    if not call.ok:
        return CodeAction("invalid", via_tool=True, error=call.error or "malformed tool call")
    if call.name not in ("run_python", "submit"):
        return CodeAction(
            "invalid", via_tool=True, error=f"unknown tool {call.name!r}; the tools are 'run_python' and 'submit'"
        )
    code = call.arguments.get("code")
    if not isinstance(code, str) or not code.strip():
        return CodeAction(
            "invalid", via_tool=True, error=f'{call.name} needs a non-empty string argument "code", got {code!r}'
        )
    return CodeAction("run" if call.name == "run_python" else "submit", code=code, via_tool=True)


def parse_action(text: str, entry_point: str, *, submit_on_definition: bool = True) -> CodeAction:
    """Classify one assistant turn (a tool call wins over fenced blocks when both appear)."""
    if has_tool_call(text):
        return _from_tool_call(text)
    blocks = python_blocks(text)
    if not blocks:
        return CodeAction("none")
    if submit_on_definition:
        # The last block that defines the entry point is the answer; earlier ones were drafts.
        for block in reversed(blocks):
            if defines_function(block, entry_point):
                return CodeAction("submit", code=block)
    return CodeAction("run", code="\n".join(blocks))
