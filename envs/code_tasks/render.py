"""Rendering generated tasks as text: the problem statement and assert-style test snippets.

A test snippet binds the result first, so a failing check reports the call, what it returned and what
was expected ("f('') returned 1, expected 0"): that message is the feedback a draft gets.
"""

from __future__ import annotations

import textwrap
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
    """The function stub with a docstring and doctest-style examples, in a python code block."""
    body = textwrap.fill(doc, width=96, initial_indent="    ", subsequent_indent="    ").lstrip()
    lines = [signature, f'    """{body}', ""]
    for call, expected in examples:
        lines += [f"    >>> {call}", f"    {expected}"]
    lines.append('    """')
    code = "\n".join(lines)
    return f"Complete this Python function:\n\n```python\n{code}\n```"
