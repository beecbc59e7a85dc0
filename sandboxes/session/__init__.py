"""The session server shipped into every sandbox, and server_source() that assembles it for `python3 -c`.

The six modules are importable on the host (for reading and linting) and concatenated, minus their
cross-imports (`from sandboxes...`, found by parsing, however they are formatted), into one
stdlib-only script inside the sandbox.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

_PARTS = ("fdwait.py", "process_tree.py", "worker.py", "service.py", "wipe.py", "server.py")


def _without_host_imports(source: str) -> str:
    """``source`` minus its ``from __future__`` and ``from sandboxes... import`` statements (all their lines)."""
    drop: set[int] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("sandboxes", "__future__"):
            drop.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return "\n".join(line for number, line in enumerate(source.splitlines(), 1) if number not in drop)


@lru_cache(maxsize=1)
def server_source() -> str:
    """The session server as one script: the parts in ``_PARTS`` order, host-only imports removed."""
    here = Path(__file__).parent
    text = "\n".join(_without_host_imports((here / name).read_text()) for name in _PARTS)
    # One __future__ import at the top makes the annotations lazy, so the script runs on Python 3.9+.
    return "from __future__ import annotations\n" + text + "\n"
