"""Every relative link in README.md and docs/ opens: the file exists and, for `file.md#anchor`, the file has a
heading with that anchor (GitHub's rule), so a measurement moved out of the README is one working click away."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", flags=re.DOTALL | re.MULTILINE)


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: lowercase, punctuation dropped (word characters, spaces and '-' kept),
    each space a '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a markdown page's headings (outside code blocks); repeated headings get -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text(encoding="utf-8")), flags=re.M):
        slug = github_anchor(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def broken_links(page: Path) -> list[str]:
    """The relative links of a page whose file or anchor does not exist."""
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        shown = file.relative_to(ROOT) if file.is_relative_to(ROOT) else file
        if not file.exists():
            broken.append(f"{target} (no file {shown})")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target} (no heading with that anchor in {shown})")
    return broken


def test_the_anchor_rule_matches_githubs_on_headings_this_repo_uses() -> None:
    assert github_anchor("The main job's single-seed runs (2026-12-01 and 2026-12-02, moved from the README)") == (
        "the-main-jobs-single-seed-runs-2026-12-01-and-2026-12-02-moved-from-the-readme"
    )
    assert github_anchor("The tasks (`envs/code_tasks/`)") == "the-tasks-envscode_tasks"
    assert (
        github_anchor("Embedded (`engine.kind: embedded`, the default)") == "embedded-enginekind-embedded-the-default"
    )


def test_every_relative_link_in_the_readme_and_docs_opens() -> None:
    broken = {str(page.relative_to(ROOT)): links for page in PAGES if (links := broken_links(page))}
    assert not broken, broken


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# A heading\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-heading) [bad](other.md#nope) [gone](missing.md)\n", encoding="utf-8")
    assert [link.split(" ")[0] for link in broken_links(page)] == ["other.md#nope", "missing.md"]


CODE_REF = re.compile(r"\bdocs/([\w./-]+\.md)(#[\w-]+)?")
CODE_SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".toml", ".cfg", ".txt"}
# Files a user who clones the repository does not have; the code cites docs/ instead. The patterns are split so
# that this file does not match them itself.
OUTSIDE = re.compile("GSPO" + r"\.md|" + "DE" + r"SIGN section|" + "SGLANG" + r"\.md|" + r"\.\./" + "shared/")
SETUP_PATH = re.compile(r"AGENTRL_SGLANG_CPU:-\.\./" + "shared/")  # the set-up scripts' default wheel folder


def code_files() -> list[Path]:
    """The repository's source, configs and scripts outside docs/ (tracked or not, caches and venvs skipped)."""
    skip = {".git", ".venv", "node_modules", "__pycache__", "models", "runs"}
    return sorted(
        path
        for path in ROOT.rglob("*")
        if path.suffix in CODE_SUFFIXES
        and path.is_file()
        and not any(part in skip or part.startswith(".venv") for part in path.relative_to(ROOT).parts)
    )


def broken_code_refs(path: Path) -> list[str]:
    """The ``docs/<file>.md#<anchor>`` references in a code file whose file or heading does not exist."""
    broken = []
    for name, anchor in CODE_REF.findall(path.read_text(encoding="utf-8", errors="replace")):
        target = ROOT / "docs" / name
        if not target.exists():
            broken.append(f"docs/{name}{anchor} (no such file)")
        elif anchor and anchor[1:] not in anchors(target):
            broken.append(f"docs/{name}{anchor} (no heading with that anchor)")
    return broken


def test_every_docs_reference_in_the_code_opens() -> None:
    broken = {str(path.relative_to(ROOT)): refs for path in code_files() if (refs := broken_code_refs(path))}
    assert not broken, broken


def test_no_file_cites_a_file_outside_the_repository() -> None:
    found = {}
    for path in [*code_files(), *PAGES]:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        hits = [f"{n}: {line.strip()}" for n, line in enumerate(lines, 1) if OUTSIDE.search(SETUP_PATH.sub("", line))]
        if hits:
            found[str(path.relative_to(ROOT))] = hits
    assert not found, found


def test_a_broken_code_reference_is_found(tmp_path: Path) -> None:
    page = ROOT / "docs" / "algorithm.md"
    assert "the-gspo-objective" in anchors(page)
    code = tmp_path / "x.py"
    nope = "docs/" + "algorithm.md#nope"  # split so that this file does not cite it
    code.write_text(f'"""See docs/algorithm.md#the-gspo-objective and {nope}."""\n', encoding="utf-8")
    assert broken_code_refs(code) == [f"{nope} (no heading with that anchor)"]
