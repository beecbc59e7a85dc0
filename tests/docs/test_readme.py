"""The README is a front page: at most 200 lines in the issue's order, its environment example runs as written, its
two commands are the real scripts, and its main-job table shows the numbers its picture is drawn from."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RECORD = ROOT / "docs" / "img" / "mainjob.json"


def _text() -> str:
    return README.read_text(encoding="utf-8")


def test_the_readme_is_short_and_in_the_front_page_order() -> None:
    text = _text()
    assert len(text.splitlines()) <= 200
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings == [
        "Two commands",
        "What the main job shows",
        "Write an environment",
        "Commands",
        "Documentation",
    ]


def test_the_two_commands_are_the_scripts_that_exist() -> None:
    block = re.search(r"^## Two commands\n.*?^```bash\n(.*?)^```", _text(), flags=re.S | re.M)
    assert block, "the README has no ```bash block under '## Two commands'"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["bash scripts/quickstart.sh", "bash scripts/test.sh"]
    assert all((ROOT / c.split()[1]).is_file() for c in commands)


def test_the_environment_example_runs_as_written(tmp_path: Path) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", _text(), flags=re.S | re.M)
    assert len(blocks) == 1, "the README's example is its only python block"
    (tmp_path / "example.py").write_text(blocks[0], encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # the printed lines are the ones the example's comments promise
    promised = [line.split("  # ")[1] for line in blocks[0].splitlines() if line.startswith("print(")]
    assert done.stdout.splitlines() == promised


def _main_job_section() -> list[str]:
    text = _text()
    start = text.index("## What the main job shows\n")
    return text[start : text.index("\n## ", start + 3)].splitlines()[1:]


def test_the_main_job_section_is_a_picture_and_at_most_15_lines() -> None:
    lines = [line for line in _main_job_section() if line.strip()]
    prose = [line for line in lines if not line.startswith("![")]
    assert any(line.startswith("![") and "docs/img/mainjob.png" in line for line in lines)
    assert len(prose) <= 15, f"{len(prose)} lines of prose; the numbers belong in docs/results/main-job.md"


def test_the_main_job_section_quotes_the_numbers_the_picture_is_drawn_from() -> None:
    runs = json.loads(RECORD.read_text(encoding="utf-8"))["runs"]
    gains = [run["splits"]["test_instances"]["gain"] for run in runs]
    quoted = [
        f"{g['mean']:+.2f}" if g["lo"] == g["hi"] == g["mean"] else f"{g['mean']:+.2f} [{g['lo']:+.2f}, {g['hi']:+.2f}]"
        for g in gains
    ]
    section = " ".join(_main_job_section())
    assert f"{quoted[0]}, {quoted[1]} and {quoted[2]}" in section, quoted
