"""``parse_python`` holds up where ``ast.parse`` does not: threads that parse while garbage collections hand the
GIL around (every collection sleeps 0 s here, as a finalizer that blocks would). On CPython 3.11 bare
``ast.parse`` then raises ``SystemError: AST constructor recursion depth mismatch`` (the control below shows the
stress reaches it); this is the fault that scored an honest grading as a flagged 0 in the suite."""

from __future__ import annotations

import ast
import gc
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from agentrl.util.python_ast import parse_python

SOURCE = "\n".join(f"def f{i}(x):\n    return [y for y in range(x) if y % {i + 1} == 0]" for i in range(150))


@pytest.fixture
def collections_switch_threads() -> Iterator[None]:
    def give_up_the_gil(phase: str, info: dict[str, int]) -> None:
        time.sleep(0)

    threshold = gc.get_threshold()
    gc.callbacks.append(give_up_the_gil)
    gc.set_threshold(50)
    try:
        yield
    finally:
        gc.callbacks.remove(give_up_the_gil)
        gc.set_threshold(*threshold)


def _errors_from_threads(parse: Callable[[str], object]) -> list[SystemError]:
    errors: list[SystemError] = []

    def work(depth: int) -> None:
        if depth:  # start from different stack depths, as a deep test and a shallow worker thread do
            return work(depth - 1)
        for _ in range(20):
            try:
                parse(SOURCE)
            except SystemError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=work, args=(20 * (i % 2),)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_parse_python_is_safe_from_several_threads(collections_switch_threads: None) -> None:
    assert _errors_from_threads(parse_python) == []


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the control: this CPython race is the 3.11 series'")
def test_the_control_bare_ast_parse_fails_under_the_same_stress(collections_switch_threads: None) -> None:
    errors = [error for _ in range(3) for error in _errors_from_threads(ast.parse)]
    assert errors and "recursion depth mismatch" in str(errors[0])


def test_the_project_parses_only_through_parse_python() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    callers = [
        str(path.relative_to(root))
        for folder in ("agentrl", "envs")
        for path in (root / folder).rglob("*.py")
        if "ast.parse(" in path.read_text(encoding="utf-8") and path.name != "python_ast.py"
    ]
    # the BFCL worker runs alone in its own interpreter (BFCL's environment), single-threaded
    assert callers == ["envs/interop/bfcl/worker.py"], callers
