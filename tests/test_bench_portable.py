"""The portable-path benchmarks run end to end in their tiny modes: the C++ loop against the Python loop per kind
(the forced ``avx2`` kind runs torch at AVX2), and the trainer step's profile."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/


def test_portable_loop_bench_compares_both_loops_per_kind(tmp_path: Path) -> None:
    from agentrl.engines.embedded.cpu.portable import portable_problem

    out = tmp_path / "portable.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_portable_loop.py"), "--quick", "--kinds", "native", "avx2"]
    cmd += ["--batches", "1", "3", "--pairs", "1", "--steps", "3", "--threads", "1", "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, cwd=ROOT)
    report = json.loads(out.read_text())
    assert report["avx2"]["cpu_capability"] in ("AVX2", "DEFAULT")  # torch's kernels capped in the forced kind
    import torch

    if portable_problem(torch.device("cpu")) is not None:
        assert all("skipped" in cell for cell in report["native"]["cells"])
        return
    for kind in ("native", "avx2"):
        assert [cell["batch"] for cell in report[kind]["cells"]] == [1, 3]
        for cell in report[kind]["cells"]:
            assert cell["python_over_cpp"] > 0 and cell["step_ms"]["cpp"] > 0
            assert cell["profile"]["op_share"]["matmul"] > 0
            assert cell["profile"]["cpp_loop_self_share"] > 0  # the profiler saw the C++ loop's own op


def test_trainer_profile_reports_shares_and_the_gemm_fraction(tmp_path: Path) -> None:
    from agentrl.models.tiny import make_tiny_model

    model = make_tiny_model(tmp_path / "model", hidden_size=64, num_layers=2)
    out = tmp_path / "trainer.json"
    cmd = [sys.executable, str(ROOT / "bench" / "trainer_profile.py"), "--model", str(model), "--shape", "2", "16"]
    cmd += ["--gemm", "128", "--threads", "1", "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, cwd=ROOT)
    report = json.loads(out.read_text())
    for ckpt in ("nockpt", "ckpt"):
        cell = report[ckpt]
        assert cell["tok_s"] > 0 and cell["mfu"] > 0 and cell["op_share"]["matmul"] > 0 and cell["top_ops"]
