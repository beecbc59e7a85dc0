"""The small-ops benchmark runs both forms of the same decode steps in its tiny mode and reports their ratio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentrl.engines.embedded.sglang_kernels import REQUIRED_CPU_FLAGS, _cpu_flags, kernels_problem

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = kernels_problem(torch.bfloat16, torch.device("cpu"))


def test_small_ops_quick_mode_times_both_forms(tmp_path: Path) -> None:
    if PROBLEM is not None:
        if os.environ.get("CI") == "true" and all(flag in _cpu_flags() for flag in REQUIRED_CPU_FLAGS):
            pytest.fail(f"CI=true on a CPU with {REQUIRED_CPU_FLAGS} but SGLang's CPU kernels do not run: {PROBLEM}")
        pytest.skip(f"SGLang's CPU kernels do not run here: {PROBLEM}")
    out = tmp_path / "small_ops.json"
    cmd = [sys.executable, str(ROOT / "scripts" / "bench" / "bench_small_ops.py"), "--quick", "--threads", "2"]
    subprocess.run([*cmd, "--batches", "1", "3", "--out", str(out)], check=True, capture_output=True, timeout=300)
    report = json.loads(out.read_text())
    assert report["thresholds"]["ALONE_MAX_ELEMENTS"] > 0 and report["thresholds"]["ALONE_MAX_ATTENTION_MACS"] > 0
    assert [cell["batch"] for cell in report["batches"]] == [1, 3]
    for cell in report["batches"]:
        assert cell["step_ms"]["whole_team"] > 0 and cell["step_ms"]["alone"] > 0
        assert cell["before_over_after"] == cell["step_ms"]["whole_team"] / cell["step_ms"]["alone"]
        assert len(cell["pairs"]) == 2
