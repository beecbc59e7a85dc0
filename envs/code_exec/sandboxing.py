"""Showing a sandboxed cell's output to the model: stdout, stderr and status notes, head and tail kept.

The sandboxes themselves come from the process's shared pools (``envs.code_exec.session``); their settings are
a typed ``sandboxes`` config (``CodeExecConfig.sandbox``), whose ``kind: auto`` uses Docker when an engine
answers and the image exists, else the process backend with a warning (docs/sandbox-security.md).
"""

from __future__ import annotations

from typing import Any


def _clip(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    return f"{text[:head]}\n[... {len(text) - max_chars} characters cut ...]\n{text[-tail:]}"


def shorten(result: Any, max_chars: int) -> str:
    """Cell output for the model: stdout, then stderr, then status notes, head and tail kept."""
    parts = [result.stdout.rstrip("\n")] if result.stdout.strip() else []
    if result.stderr.strip():
        parts.append(result.stderr.rstrip("\n"))
    if result.timed_out:
        parts.append("[timed out: the cell was stopped]")
    elif result.oom_killed:
        parts.append("[out of memory: the cell was killed]")
    if result.restarted:
        parts.append("[the Python session was restarted: earlier variables are gone]")
    text = "\n".join(parts) or "(no output)"
    return _clip(text, max_chars)
