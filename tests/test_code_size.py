"""The house size budget: no module over 400 lines, no function over 60, in the code users read.

A module that outgrows the budget is doing more than one job; a function that does is a list of steps that
deserve names. The check reads the source statically (``ast``), so it covers code that is never imported in
tests (scripts, optional back-ends) too. The test names every offender with its size, so the fix is obvious.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agentrl", "envs", "sandboxes", "scripts", "bench")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def python_files() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def oversized(path: Path, root: Path = ROOT) -> list[str]:
    """Each way ``path`` breaks the budget, as ``file[:line name]: N lines (max M)``."""
    source = path.read_text()
    where = path.relative_to(root)
    found: list[str] = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{where}: {lines} lines (max {MAX_MODULE_LINES}): split it by job")
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(
                    f"{where}:{node.lineno} {node.name}: {length} lines (max {MAX_FUNCTION_LINES}): name its steps"
                )
    return found


def test_the_budget_check_sees_a_long_module_and_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    long_function = tmp_path / "long_function.py"
    long_function.write_text(f"def f():\n{body}\n")
    long_module = tmp_path / "long_module.py"
    long_module.write_text("\n".join(f"y{i} = {i}" for i in range(MAX_MODULE_LINES + 1)) + "\n")
    fine = tmp_path / "fine.py"
    fine.write_text("def g():\n    return 1\n")
    assert [m.split(": ")[0] for m in oversized(long_function, tmp_path)] == ["long_function.py:1 f"]
    assert oversized(long_module, tmp_path) == [
        f"long_module.py: {MAX_MODULE_LINES + 1} lines (max 400): split it by job"
    ]
    assert oversized(fine, tmp_path) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_and_function_fits_the_budget(package: str) -> None:
    files = [p for p in python_files() if p.relative_to(ROOT).parts[0] == package]
    assert files, f"no Python files under {package}/"
    problems = [problem for path in files for problem in oversized(path)]
    assert not problems, "over the size budget:\n" + "\n".join(problems)
