"""docs/extending.md: the 'Adding a loss' and 'Adding an advantage scheme' examples run as written and print
exactly what the page says they print, typo errors included."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def section(markdown: str, title: str) -> str:
    """The text of the ``## title`` section (up to the next level-2 heading)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", markdown, flags=re.DOTALL | re.MULTILINE)
    assert match, f"docs/extending.md has no section '## {title}'"
    return match.group(1)


def fenced(text: str, language: str) -> list[str]:
    """The fenced blocks of one language, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


@pytest.mark.parametrize(
    ("title", "module", "typo"),
    [
        ("Adding a loss", "my_losses", "algorithm.loss: unknown policy loss 'cispoo'. Did you mean 'cispo'?"),
        (
            "Adding an advantage scheme",
            "my_schemes",
            "algorithm.turn_advantage: unknown advantage scheme 'rlo'. Did you mean 'rloo'?",
        ),
    ],
)
def test_extending_example_runs_as_written(title: str, module: str, typo: str, tmp_path: Path) -> None:
    text = section(DOC.read_text(encoding="utf-8"), title)
    plugin, usage = fenced(text, "python")
    [config] = fenced(text, "yaml")
    [expected] = fenced(text, "text")
    (tmp_path / f"{module}.py").write_text(plugin, encoding="utf-8")
    (tmp_path / "run.yaml").write_text(config, encoding="utf-8")
    (tmp_path / "try_it.py").write_text(usage, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "try_it.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert typo in done.stdout  # the typo's error names the key, the did-you-mean and the registered names
    assert done.stdout == expected


def test_each_example_is_one_file_with_one_registration_line() -> None:
    markdown = DOC.read_text(encoding="utf-8")
    for title, register in (("Adding a loss", "register_loss"), ("Adding an advantage scheme", "register_scheme")):
        plugin = fenced(section(markdown, title), "python")[0]
        registrations = [line for line in plugin.splitlines() if line.startswith("register_")]
        assert len(registrations) == 1 and registrations[0].startswith(f"{register}(")


def test_the_scheme_constraint_error_quoted_in_the_doc(tmp_path: Path) -> None:
    text = section(DOC.read_text(encoding="utf-8"), "Adding an advantage scheme")
    quoted = re.search(r"the config reports `(.*?)`", text, flags=re.DOTALL)
    assert quoted, "the section quotes the adv_scale error"
    (tmp_path / "my_schemes.py").write_text(fenced(text, "python")[0], encoding="utf-8")
    (tmp_path / "run.yaml").write_text(fenced(text, "yaml")[0], encoding="utf-8")
    script = (
        "from agentrl.job.loader import load_config\n"
        "try:\n    load_config('run.yaml', ['algorithm.adv_scale=std'])\n"
        "except ValueError as error:\n    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert " ".join(quoted.group(1).split()) in done.stdout, done.stdout + done.stderr[-2000:]
