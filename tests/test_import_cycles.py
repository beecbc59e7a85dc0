"""No import cycles anywhere in the repository: the module graph, read statically from every file of
``agentrl/``, ``envs/``, ``sandboxes/``, ``scripts/``, ``bench/`` and ``tests/`` (one graph, so a loop through two
folders counts too), is acyclic.

Every import counts, wherever it sits: module level, inside a function (a lazy import), or under
``if TYPE_CHECKING``. A lazy import changes when a cycle runs, not that the two modules depend on
each other (``agentrl.env`` and ``agentrl.tools`` once hid their cycle that way), so a cycle closed
by one is still a cycle. Lazy imports stay welcome for start-up time; they just may not close a loop.
An edge goes from a module to the module it names: ``from a.b import c`` is ``a.b.c`` when that is
a module, else ``a.b``; the implicit execution of parent packages' ``__init__`` is not an edge
(every submodule would otherwise "cycle" with the package that re-exports it). Scripts and test helpers
import their neighbours by bare name (``from learning_runs import ...``, the folder on ``sys.path``): a
bare name that is a file beside the importing one is an edge to that file.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("agentrl", "envs", "sandboxes", "scripts", "bench", "tests")


def module_files(root: Path, *packages: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``root/package`` for each of ``packages``."""
    found: dict[str, Path] = {}
    for path in sorted(p for package in packages for p in (root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _target(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is one of ``modules`` (None when the import is external)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _absolute(module: str, name: str, modules: dict[str, Path]) -> str | None:
    """What an absolute import of ``name`` from ``module`` reaches: a module of the scan, else a file beside
    ``module`` (a script's or test helper's bare import of its neighbour), else None (external)."""
    if target := _target(name, modules):
        return target
    folder = module if modules[module].name == "__init__.py" else module.rpartition(".")[0]
    target = _target(f"{folder}.{name}", modules) if folder else None
    return target if target and target.startswith(f"{folder}.") else None


def _imports(module: str, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        return {t for alias in node.names if (t := _absolute(module, alias.name, modules))}
    base = node.module or ""
    if node.level:  # relative: resolve against the importing module's package
        package = module if modules[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    elif _target(base, modules) is None and (beside := _absolute(module, base, modules)):
        base = beside
    targets = set()
    for alias in node.names:
        target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else _target(base, modules)
        if target:
            targets.add(target)
    return targets


def import_graph(root: Path, *packages: str) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports anywhere in its file."""
    modules = module_files(root, *packages)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _imports(name, node, modules)
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path ``[a, b, ..., a]``, or None when the graph is acyclic (iterative DFS)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path, iters = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while path:
            nxt = next(iters[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                iters.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                iters.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_agentrl_has_no_import_cycle() -> None:
    graph = import_graph(ROOT, "agentrl")
    assert len(graph) > 50, "the scan found too few modules: is the package path right?"
    cycle = find_cycle(graph)
    assert cycle is None, (
        f"import cycle inside agentrl/: {' -> '.join(cycle or [])}; move the shared part into its own module "
        "(as agentrl.chat.messages holds what agentrl.env and agentrl.tools share)"
    )


def test_the_repository_has_no_import_cycle() -> None:
    graph = import_graph(ROOT, *FOLDERS)
    for folder in FOLDERS:
        assert any(name.startswith(f"{folder}.") for name in graph), f"the scan found nothing under {folder}/"
    cycle = find_cycle(graph)
    assert cycle is None, (
        f"import cycle: {' -> '.join(cycle or [])}; move what the two modules share into a module both import "
        "(as sandboxes.validation holds the input checks of sandboxes.base and sandboxes.service)"
    )


def test_the_check_follows_bare_imports_of_neighbouring_files(tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "runs.py").write_text("import json\nfrom stats import mean\n")
    (scripts / "stats.py").write_text("def mean():\n    from runs import json  # lazy\n")
    graph = import_graph(tmp_path, "scripts")
    assert graph == {"scripts.runs": {"scripts.stats"}, "scripts.stats": {"scripts.runs"}}
    assert find_cycle(graph) == ["scripts.runs", "scripts.stats", "scripts.runs"]


def test_the_check_finds_a_cycle_closed_by_a_lazy_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.a import A\n")
    (pkg / "a.py").write_text("from pkg.sub import b\nA = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import A  # lazy, relative\n    return A\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.a"]
    (pkg / "sub" / "b.py").write_text("def f():\n    return 1\n")
    assert find_cycle(import_graph(tmp_path, "pkg")) is None
