"""SGLang 0.5.23's own code, installed ``--no-deps`` by scripts/setup_test_deps.sh into ``.venv/sglang-0.5.23``
(with triton, which ``import sglang`` needs, and the few modules the code below imports). Kept off the suite's
import path: tests run SGLang's code in a subprocess that puts this directory first on PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SGLANG_DIR = ROOT / ".venv" / "sglang-0.5.23"


def require_sglang() -> Path:
    """The install directory; skips without it, and fails under CI (scripts/setup_test_deps.sh must have made it)."""
    if not (SGLANG_DIR / "sglang" / "version.py").is_file():
        message = f"SGLang 0.5.23's source is not installed at {SGLANG_DIR}; run bash scripts/setup_test_deps.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return SGLANG_DIR


def run_sglang_python(code: str, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with SGLang importable (its directory first on PYTHONPATH); raises on a non-zero exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(require_sglang()), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout_s, env=env, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc
