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
