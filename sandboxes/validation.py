"""Checks on what callers pass into a sandbox, shared by the session contract and its services."""

from __future__ import annotations

from sandboxes.errors import SandboxInputError


def check_timeout(timeout_s: object) -> float:
    """A positive number of seconds, else SandboxInputError naming the value."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise SandboxInputError(f"timeout_s must be a number > 0, got {timeout_s!r}: pass e.g. timeout_s=10.0")
    return float(timeout_s)


def check_code(code: object) -> str:
    """Cell source must be text."""
    if not isinstance(code, str):
        raise SandboxInputError(
            f"code must be a str of Python source, got {type(code).__name__} {code!r:.60}: pass the cell text"
        )
    return code
