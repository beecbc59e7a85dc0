"""The package layering of docs/design.md: imports point one way, between the top-level packages and, inside
``agentrl/``, from a higher floor to a lower one only.

Every import counts, wherever it sits (module level, inside a function, under ``if TYPE_CHECKING``): a lazy
import changes when a module loads, not which way the dependency points.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"agentrl": {"envs", "sandboxes"}, "sandboxes": {"agentrl", "envs"}}

# agentrl's floors, ground first (floor 1 is the ground; docs/design.md has them as a table). A package imports
# only packages on lower floors (and itself); packages on one floor are independent of each other. The package's own
# __init__ (the public surface) is not floored.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("util", "config", "chat"),  # the config toolkit and the plain sections; chat messages and their assembly
    ("models", "trajectory", "tools"),
    ("env", "algos", "engines"),  # the plug-in areas, each owning its config
    ("openai_api", "rollout"),
    ("job", "serve", "evaluation", "gateway"),  # the job assembled from the plug-ins; serving; evaluation; gateway
    ("trainer",),
    ("cli",),
    ("__main__",),
)
FLOOR_OF = {package: level for level, packages in enumerate(FLOORS, start=1) for package in packages}


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _imported_top_levels(path: Path) -> set[str]:
    return {name.split(".")[0] for name in _imported_modules(path)}


def _package_of(path: Path, root: Path) -> str:
    parts = path.relative_to(root / "agentrl").with_suffix("").parts
    return parts[0]


def floor_violations(root: Path) -> list[str]:
    """``file: package -> package`` for every import of ``root/agentrl`` that does not point to a lower floor."""
    found: list[str] = []
    for path in sorted((root / "agentrl").rglob("*.py")):
        own = _package_of(path, root)
        if own == "__init__":
            continue
        if own not in FLOOR_OF:
            found.append(f"{path.relative_to(root)}: package {own!r} has no floor in tests/test_layering.py")
            continue
        for name in sorted(_imported_modules(path)):
            parts = name.split(".")
            if parts[0] != "agentrl" or len(parts) < 2 or parts[1] == own:
                continue
            target = parts[1]
            if FLOOR_OF.get(target, len(FLOORS) + 1) >= FLOOR_OF[own]:
                found.append(f"{path.relative_to(root)}: {own} (floor {FLOOR_OF[own]}) imports {name}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_point_one_way(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no Python files found under {package}/"
    offenders = {
        str(path.relative_to(ROOT)): sorted(_imported_top_levels(path) & FORBIDDEN[package])
        for path in files
        if _imported_top_levels(path) & FORBIDDEN[package]
    }
    assert offenders == {}, f"{package}/ must not import {sorted(FORBIDDEN[package])}: {offenders}"


def test_agentrl_floors_point_down() -> None:
    packages = {_package_of(path, ROOT) for path in (ROOT / "agentrl").rglob("*.py")} - {"__init__"}
    assert packages <= set(FLOOR_OF), f"packages without a floor: {sorted(packages - set(FLOOR_OF))}"
    assert floor_violations(ROOT) == []


def test_the_floor_check_sees_an_import_up_and_one_across(tmp_path: Path) -> None:
    for package, source in {
        "config": "from agentrl.engines.base import InferenceEngine\n",  # up, as config/run.py once did
        "env": "def late():\n    from agentrl.algos import LOSSES\n",  # across a floor, and lazy
        "chat": "from agentrl.errors import AgentRLError\n",  # down: allowed
    }.items():
        (tmp_path / "agentrl" / package).mkdir(parents=True)
        (tmp_path / "agentrl" / package / "mod.py").write_text(source)
    found = floor_violations(tmp_path)
    assert len(found) == 2, found
    assert any("config (floor 2) imports agentrl.engines.base" in line for line in found)
    assert any("env (floor 4) imports agentrl.algos" in line for line in found)
