"""JSON Lines reading that splits records on "\\n" only.

JSON escapes "\\n" inside strings, so it is the only record separator. ``str.splitlines`` also breaks at
U+2028, U+2029, U+0085 and a few ASCII separators, and JSON writers (pydantic among them) leave the
non-ASCII ones raw inside strings: a model that samples U+2028 would split its episode's line in two.
"""

from __future__ import annotations

from collections.abc import Iterator


def jsonl_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) for every non-blank line of a JSON Lines text."""
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield number, line
