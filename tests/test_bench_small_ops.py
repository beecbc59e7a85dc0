"""The small-ops benchmark runs both forms of the same decode steps in its tiny mode and reports their ratio."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines.kernels_here import require_sglang_cpu_kernels

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/

ROOT = Path(__file__).resolve().parents[1]


def test_small_ops_quick_mode_times_both_forms(tmp_path: Path) -> None:
    require_sglang_cpu_kernels()
    out = tmp_path / "small_ops.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_small_ops.py"), "--quick", "--threads", "2"]
    subprocess.run([*cmd, "--batches", "1", "3", "--out", str(out)], check=True, capture_output=True, timeout=300)
    report = json.loads(out.read_text())
    assert report["thresholds"]["ALONE_MAX_ELEMENTS"] > 0 and report["thresholds"]["ALONE_MAX_ATTENTION_MACS"] > 0
    assert [cell["batch"] for cell in report["batches"]] == [1, 3]
    for cell in report["batches"]:
        assert cell["step_ms"]["whole_team"] > 0 and cell["step_ms"]["alone"] > 0
        assert cell["before_over_after"] == cell["step_ms"]["whole_team"] / cell["step_ms"]["alone"]
        assert len(cell["pairs"]) == 2
