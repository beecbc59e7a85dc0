"""The two programs grading ships out of this process: the solution's sandbox service and the judge.

Each is one stdlib-only script assembled from modules of this package (importable here for reading,
linting and unit tests), minus their imports of each other.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from agentrl.util.python_ast import parse_python

_HERE = Path(__file__).parent


def _without_package_imports(source: str) -> str:
    """``source`` minus its ``from __future__`` and ``from envs... import`` statements (all their lines)."""
    drop: set[int] = set()
    for node in parse_python(source).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("envs", "__future__"):
            drop.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return "\n".join(line for number, line in enumerate(source.splitlines(), 1) if number not in drop)


def _assemble(*modules: str) -> str:
    body = "\n".join(_without_package_imports((_HERE / name).read_text(encoding="utf-8")) for name in modules)
    return "from __future__ import annotations\n" + body + "\nmain()\n"


@lru_cache(maxsize=1)
def solution_server_source() -> str:
    """The sandbox service that loads the solution and answers calls: wire + monitor + solution_server."""
    return _assemble("wire.py", "monitor.py", "solution_server.py")


@lru_cache(maxsize=1)
def judge_source() -> str:
    """The host-side judge process: wire + seal + judge."""
    return _assemble("wire.py", "seal.py", "judge.py")
