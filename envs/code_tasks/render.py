"""Rendering generated tasks as text: the problem statement and assert-style test snippets.

A test snippet binds the result first, so a failing check reports the call, what it returned and what
was expected ("f('') returned 1, expected 0"): that message is the feedback a draft gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def call_source(entry_point: str, args: Sequence[Any]) -> str:
    """Source of a call with literal arguments, e.g. ``f('ab', [1, 2])``."""
    return f"{entry_point}({', '.join(repr(a) for a in args)})"


def test_snippet(call: str, expected: str) -> str:
    """A test that passes when ``call`` returns a value equal to ``expected`` and of the same type."""
    # repr(call) is a string literal of the call's text: the message never re-evaluates it.
    return (
        f"_got = {call}\n"
        f"assert _got == {expected} and type(_got) is type({expected}), "
        f"{call!r} + ' returned ' + repr(_got) + ', expected ' + {expected!r}\n"
    )


def statement(signature: str, doc: str, examples: Sequence[tuple[str, str]]) -> str:
    """The task in plain words: the signature in backticks, the instruction, then ``call == value`` examples.

    Not a stub with a docstring: a small model copies a docstring back verbatim, which spends its token
    budget before the body and cuts the function off.
    """
    header = signature.removeprefix("def ").removesuffix(":")
    lines = [f"Write a Python function `{header}`.", doc, "", "Examples:"]
    lines += [f"{call} == {expected}" for call, expected in examples]
    return "\n".join(lines)
