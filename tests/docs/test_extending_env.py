"""docs/extending.md, section "Adding an environment", runs as written: the one new file with its registration
line, the config, the `--dry-run` lines, and the exact errors for a typo in the env id, the class and a kwarg."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "extending.md"
AGENTRL = Path(sys.executable).parent / "agentrl"  # the console script a user runs


def section(markdown: str, title: str) -> str:
    """The text of the ``## title`` section (up to the next ``## `` heading)."""
    start = markdown.index(f"\n## {title}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end != -1 else len(markdown)]


def blocks(markdown: str, language: str) -> list[str]:
    """The fenced blocks of one language, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", markdown, flags=re.DOTALL | re.MULTILINE)


def _agentrl(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the working directory must be enough
    return subprocess.run([str(AGENTRL), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_adding_an_environment_walkthrough_runs_as_written(tiny_model_dir: Path, tmp_path: Path) -> None:
    text = section(DOC.read_text(encoding="utf-8"), "Adding an environment")
    [env_file], [config], outputs = blocks(text, "python"), blocks(text, "yaml"), blocks(text, "text")
    dry_run, id_typo, class_typo, kwarg_typo = outputs
    assert env_file.rstrip().endswith('register_env("me/Countdown-v0", entry_point="my_envs:Countdown")')
    (tmp_path / "my_envs.py").write_text(env_file, encoding="utf-8")
    (tmp_path / "countdown.yaml").write_text(config, encoding="utf-8")

    done = _agentrl(tmp_path, "train", "countdown.yaml", "--dry-run", f"model.path={tiny_model_dir}")
    assert done.returncode == 0, done.stderr[-2000:]
    for line in dry_run.strip().splitlines():
        assert line in done.stdout.splitlines(), (line, done.stdout)

    for wrong, expected in (
        ("id: me/Countdwn-v0", id_typo),
        ("id: my_envs:Countdwn", class_typo),
        ("kwargs: {strat: 5}", kwarg_typo),
    ):
        key = wrong.split(":")[0]
        original = next(line for line in config.splitlines() if line.strip().startswith(f"{key}:"))
        broken = config.replace(original, f"{original[: original.index(key)]}{wrong}")
        (tmp_path / "countdown.yaml").write_text(broken, encoding="utf-8")
        failed = _agentrl(tmp_path, "train", "countdown.yaml", "--dry-run", f"model.path={tiny_model_dir}")
        assert failed.returncode == 2 and failed.stderr.strip() == expected.strip(), failed.stderr
