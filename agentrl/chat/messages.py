"""Chat messages: the ``Message`` type and its constructors (``system``, ``user``, ``assistant``, ``tool``).

A message is a plain dict with a ``role`` and a string ``content`` (a tool message may carry the
tool's ``name``), so it crosses process and disk boundaries as JSON unchanged.
"""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]


def system(content: str) -> Message:
    """A system chat message."""
    return {"role": "system", "content": content}


def user(content: str) -> Message:
    """A user chat message."""
    return {"role": "user", "content": content}


def assistant(content: str) -> Message:
    """An assistant chat message."""
    return {"role": "assistant", "content": content}


def tool(content: str, name: str | None = None) -> Message:
    """A tool-result chat message."""
    message: Message = {"role": "tool", "content": content}
    if name is not None:
        message["name"] = name
    return message
