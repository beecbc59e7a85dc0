"""The documentation's 'new environment in one file' example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "writing-an-environment.md"


def python_blocks(markdown: str) -> list[str]:
    """The fenced ```python blocks of a markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.DOTALL | re.MULTILINE)


def test_writing_an_environment_example_runs(tmp_path: Path) -> None:
    env_file, usage = python_blocks(DOC.read_text(encoding="utf-8"))[:2]
    (tmp_path / "my_envs.py").write_text(env_file, encoding="utf-8")
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
    lines = done.stdout.splitlines()
    assert lines[0] == "['q1', 'q3', 'q5']" and lines[1] == "add"
    assert lines[2].startswith("What is 54 + 98?")
    assert lines[3] == "[{'role': 'tool', 'content': '152', 'name': 'add'}]"
    assert lines[-1] == "MathQuiz works"
