"""docs/extending.md, 'Adding an engine backend': the example backend, config and script run as written,
and print what the doc says they print (the typo error included)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "extending.md"
SECTION = "## Adding an engine backend"


def section_blocks(markdown: str, heading: str) -> dict[str, list[str]]:
    """The fenced blocks of one ``## `` section, by language, in order."""
    start = markdown.index(heading)
    end = markdown.find("\n## ", start + len(heading))
    text = markdown[start : end if end != -1 else None]
    blocks: dict[str, list[str]] = {}
    for lang, body in re.findall(r"^```(\w+)\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE):
        blocks.setdefault(lang, []).append(body)
    return blocks


def test_engine_backend_walkthrough_runs_as_written(tiny_model_dir: Path, tmp_path: Path) -> None:
    blocks = section_blocks(DOC.read_text(encoding="utf-8"), SECTION)
    backend, script = blocks["python"]
    (config,) = blocks["yaml"]
    (expected,) = blocks["text"]
    (tmp_path / "my_engines.py").write_text(backend, encoding="utf-8")
    (tmp_path / "try_it.py").write_text(script, encoding="utf-8")
    (tmp_path / "recording.yaml").write_text(config, encoding="utf-8")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    done = subprocess.run(
        [sys.executable, "try_it.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env={"PYTHONPATH": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == expected.splitlines()
    assert "engine.kind: unknown engine kind 'recordin' -> Did you mean 'recording'?" in done.stdout
    records = (tmp_path / "requests.jsonl").read_text().splitlines()
    assert len(records) == 1 and '"finish_reason": "length"' in records[0]


def test_the_agentrl_command_imports_engine_modules_from_the_working_directory(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The doc once said the working directory is not on the import path; it is, for every import_modules."""
    text = DOC.read_text(encoding="utf-8")
    assert "does not put the working" not in " ".join(text.split())
    blocks = section_blocks(text, SECTION)
    (tmp_path / "my_engines.py").write_text(blocks["python"][0], encoding="utf-8")
    (tmp_path / "recording.yaml").write_text(blocks["yaml"][0], encoding="utf-8")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    agentrl = Path(sys.executable).parent / "agentrl"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(agentrl), "train", "recording.yaml", "--dry-run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert "my_engines" not in done.stderr, done.stderr[-2000:]
    assert "engine recording" in done.stdout or done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
