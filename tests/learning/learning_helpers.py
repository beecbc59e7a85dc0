"""Helpers of the learning-benchmark smoke tests: run a script from bench/ and read its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_script(name: str, *args: str, timeout: int = 600) -> str:
    """Run ``bench/<name>`` (``studies/...`` or ``bench/...``) from the repository root; its stdout."""
    cmd = [sys.executable, str(ROOT / "bench" / name.removeprefix("bench/")), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if done.returncode != 0:
        raise AssertionError(f"{name} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def read_json(path: Path) -> Any:
    """A JSON file's content."""
    return json.loads(path.read_text())
