"""bench/bench_grader.py runs end to end on a few tasks (process backend) and reports what it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_grader_reports_latency_throughput_and_agreement() -> None:
    command = [
        sys.executable,
        "bench/bench_grader.py",
        "--backend",
        "process",
        "--easy",
        "2",
        "--humaneval",
        "2",
    ]
    done = subprocess.run(
        [*command, "--pool", "1", "--rounds", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    for name in ("easy", "humaneval"):
        latency = report[name]["latency"]
        assert report[name]["agree"] and latency["old"]["passed"] == latency["new"]["passed"] == 2
        assert latency["new"]["p90_ms"] >= latency["new"]["p50_ms"] > 0
        assert report[name]["throughput"]["new_tasks_per_s"] > 0
    assert report["humaneval"]["wrong_failed"] == {"old": 2, "new": 2}
