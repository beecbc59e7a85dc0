"""Moved modules keep their old import path for one release: it is the new module, and it warns naming
the new path. Nothing in the repository itself uses an old path (so none of its own imports warns).
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

from agentrl._moved import MOVED

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("agentrl", "envs", "sandboxes", "scripts", "tests")
SHIMS = {ROOT / (old.replace(".", "/") + ".py") for old in MOVED}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_import_path_is_the_new_module_and_warns(old: str) -> None:
    new = importlib.import_module(MOVED[old])
    sys.modules.pop(old, None)  # import it afresh, as a user's first import does
    with pytest.warns(DeprecationWarning, match=re.escape(f"{old} moved to {MOVED[old]}")):
        module = importlib.import_module(old)
    assert module is new
    assert getattr(importlib.import_module(old.rpartition(".")[0]), old.rpartition(".")[2]) is new


def _old_paths_imported(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(old for old in MOVED for name in names if name == old or name.startswith(f"{old}."))
    return found


def test_the_repository_imports_no_old_path() -> None:
    offenders = {}
    for path in sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")):
        if path not in SHIMS and (old := _old_paths_imported(ast.parse(path.read_text(encoding="utf-8")))):
            offenders[str(path.relative_to(ROOT))] = sorted(old)
    for path in sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]):
        for block in re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S):
            if old := _old_paths_imported(ast.parse(block)):
                offenders[str(path.relative_to(ROOT))] = sorted(old)
    assert not offenders, f"old import paths in use (agentrl/_moved.py names the new ones): {offenders}"


def test_the_check_sees_an_old_import() -> None:
    old = sorted(MOVED)[0]
    assert _old_paths_imported(ast.parse(f"from {old} import x\n")) == {old}
    assert _old_paths_imported(ast.parse(f"import {MOVED[old]}\n")) == set()
