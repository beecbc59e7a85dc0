"""bench/bench_sandbox.py keeps working: a tiny run prints the JSON report with every number."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.docker
@pytest.mark.slow
def test_bench_script_reports_json(config_for: Callable[..., Any]) -> None:
    config_for("docker")  # skip (or fail under CI=true) without Docker
    args = ["--cells", "20", "--seconds", "0.3", "--cold", "1"]
    done = subprocess.run(
        [sys.executable, "bench/bench_sandbox.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["warm_cell_docker"]["p50_ms"] < report["cold"]["docker_run"]["p50_ms"]
    assert report["pool4"]["cells_per_s"] > 0 and report["cold_run_over_warm_cell_p50"] > 1
