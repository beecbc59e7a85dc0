"""Under CI=true a skipped Docker test fails the run; elsewhere it stays a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SKIPPING_DOCKER_TEST = """
import pytest

@pytest.mark.docker
def test_needs_docker():
    pytest.skip("no Docker engine")

def test_plain():
    pytest.skip("not a docker test")
"""


def _run(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(SKIPPING_DOCKER_TEST)
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(Path(__file__).resolve().parent)}
    # -p conftest loads tests/conftest.py as a plugin; -c /dev/null keeps the project's addopts out.
    args = [sys.executable, "-m", "pytest", "-p", "conftest", "-c", "/dev/null", "-rA", "-p", "no:cacheprovider"]
    args += ["-W", "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path / "test_probe.py")]
    return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_docker_skip_fails_under_ci(tmp_path: Path) -> None:
    done = _run(tmp_path, "true")
    assert done.returncode == 1, done.stdout
    assert "1 failed, 1 skipped" in done.stdout
    assert "CI=true but this Docker test was skipped (Skipped: no Docker engine)" in done.stdout


def test_docker_skip_is_a_skip_elsewhere(tmp_path: Path) -> None:
    done = _run(tmp_path, "")
    assert done.returncode == 0, done.stdout
    assert "2 skipped" in done.stdout
