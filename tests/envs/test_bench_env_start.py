"""bench/bench_env_start.py keeps working: a tiny run reports both forms, and carrying the evaluation's
sandboxes over starts fewer in the rollout's first step than starting it cold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_env_start_reports_both_forms() -> None:
    args = ["--eval-envs", "3", "--rollout-envs", "4", "--rounds", "1"]
    done = subprocess.run(
        [sys.executable, "bench/bench_env_start.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    shared, cold = report["median"]["shared"], report["median"]["no_carry"]
    # 3 session sandboxes carried over: the step starts 1 session sandbox and at most the gradings' extra ones
    assert shared["rollout_step1"]["sandboxes_started"] < cold["rollout_step1"]["sandboxes_started"]
    assert cold["rollout_step1"]["sandboxes_started"] >= 5  # 4 sessions and at least one grading sandbox
    assert report["rollout_step1_shared_over_no_carry"]["wall_s"] > 0
