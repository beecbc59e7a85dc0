"""The native-kernels benchmark times both attention kernels and the three engine forms in its tiny mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines.kernels_here import require_native_kernels, require_sglang_cpu_kernels

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/

ROOT = Path(__file__).resolve().parents[1]


def test_native_kernels_quick_mode_compares_every_form(tmp_path: Path) -> None:
    require_sglang_cpu_kernels()
    require_native_kernels()
    out = tmp_path / "native.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_native_kernels.py"), "--quick", "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300, cwd=ROOT)
    report = json.loads(out.read_text())
    assert report["read_gb_s"] > 0
    assert [(c["rows"], c["width"]) for c in report["kernel"]] == [(1, 20), (3, 20)]
    for cell in report["kernel"]:
        assert set(cell["us"]) == {"agentrl", "sglang"} and min(cell["us"].values()) > 0
        assert cell["sglang_over_agentrl"] == cell["us"]["sglang"] / cell["us"]["agentrl"]
        assert max(cell["max_gap_to_float32"].values()) < 0.02  # both attend correctly (bf16 rounding apart)
        assert 0 < cell["fraction_of_read_bandwidth"]["agentrl"] == cell["kv_gb_s"]["agentrl"] / report["read_gb_s"]
    assert [c["rows"] for c in report["matmul"]] == [1, 3]
    for cell in report["matmul"]:
        assert min(cell["gflop_s"]["agentrl"], cell["gflop_s"]["sglang"]) > 0
        assert cell["sglang_over_agentrl"] == cell["ms"]["sglang"] / cell["ms"]["agentrl"]
    assert [(c["batch"], c["prompt"]) for c in report["engine"]] == [(1, 8), (3, 8)]
    for cell in report["engine"]:
        assert set(cell["step_ms"]) == {"off", "python_loop", "on"} and min(cell["step_ms"].values()) > 0
        assert cell["off_over_on"] == cell["step_ms"]["off"] / cell["step_ms"]["on"]
