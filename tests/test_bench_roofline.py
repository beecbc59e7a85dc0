"""The roofline benchmark runs end to end in its tiny mode and reports every fraction it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from gemm_layouts import forms_for  # noqa: E402

from agentrl.engines.embedded.cpu import portable  # noqa: E402

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/

FORMS_TIMED = ("linear", "in_out", "weight_left", "packed", "sglang", "agentrl", "agentrl_fp32")


def test_roofline_quick_mode_reports_positive_fractions_for_fp32_and_bf16(tmp_path: Path) -> None:
    out = tmp_path / "roofline.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_roofline.py"), "--quick", "--threads", "1"]
    cmd += ["--bf16", "always", "--batches", "1", "3", "--profile", "3", "--compare-weight-left"]
    cmd += ["--compare-packed", "--compare-kernels", "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, cwd=ROOT)
    report = json.loads(out.read_text())
    hw = report["machine"]
    assert hw["bandwidth_gb_s"] > 0
    assert set(hw["gemm_gflop_s"]) == {"fp32", "bf16"}
    assert set(hw["gemm_gflop_s"]["fp32"]) == {"128^3", "decode_b1_64x128", "decode_b3_64x128"}
    assert report["model"]["params"]["total"] > 0 and report["skipped"] == {}
    for dtype in ("fp32", "bf16"):
        engine = report["engine"][dtype]
        assert set(engine["decode"]) == {"b1", "b3"}
        for cell in [*engine["decode"].values(), engine["prefill"]]:
            assert cell["tok_s"] > 0 and cell["roofline_tok_s"] > 0
            assert cell["fraction"] == cell["tok_s"] / cell["roofline_tok_s"]
        for ckpt in ("nockpt", "ckpt"):
            cell = report["trainer"][f"{dtype}_{ckpt}"]
            assert cell["tok_s"] > 0 and cell["mfu"] == cell["tok_s"] / cell["roofline_tok_s"]
    assert set(report["bf16_over_fp32"]) == {"decode_b1", "decode_b3", "prefill", "train_nockpt", "train_ckpt"}
    assert all(v > 0 for v in report["bf16_over_fp32"].values())
    assert set(report["engine"]["fp32_linear"]["decode"]) == {"b1", "b3"}  # the side-by-side engine form run
    assert set(report["fp32_default_over_linear"]) == {"b1", "b3", "prefill"}
    assert all(v > 0 for v in report["fp32_default_over_linear"].values())
    assert set(report["engine"]["bf16_unpacked"]["decode"]) == {"b1", "b3"}  # the bf16 engine without packing
    assert set(report["bf16_default_over_unpacked"]) == {"b1", "b3", "prefill"}
    assert all(v > 0 for v in report["bf16_default_over_unpacked"].values())
    assert set(report["bf16_default_over_torch_ops"]) == {"b1", "b3", "prefill"}  # engine.cpu_kernels torch beside
    [profile] = report["profile_fp32_decode"]
    assert profile["batch"] == 3 and profile["engine_step_ms"] > 0 and profile["bare_step_ms"] > 0
    assert profile["op_share"]["matmul"] > 0 and profile["top_ops"]  # the profiler saw the forward's ops
    layouts = report["layouts"]  # every decode matmul of the model, in each form, per dtype and batch
    assert set(layouts) == {"fp32_b1", "fp32_b3", "bf16_b1", "bf16_b3"}
    for key, cell in layouts.items():
        # bf16 also times oneDNN's packed weights where they work, SGLang's and agentrl's where they run and fit
        forms = [f for f in FORMS_TIMED if f"step_{f}_gflop_s" in cell]
        dtype = torch.bfloat16 if key.startswith("bf16") else torch.float32
        # the model's shapes decide the kernels' forms (the tiny model's may not fit them), every other form is timed
        kernel_forms = {"sglang", "agentrl"}
        assert set(forms) - kernel_forms == set(forms_for(dtype)) - kernel_forms
        assert all(form in forms_for(dtype) for form in set(forms) & kernel_forms)
        assert set(cell["shapes"]) == {"qkv", "o", "gate_up", "down", "lm_head"}
        assert all(r[f"{f}_gflop_s"] > 0 for r in cell["shapes"].values() for f in forms)
        assert all(cell[f"{f}_over_linear"] > 0 for f in forms[1:])
        assert max(forms, key=lambda f: cell[f"step_{f}_gflop_s"]) == cell["best_form"]
    assert "packed" not in forms_for(torch.float32)


def test_roofline_kinds_run_each_kind_in_its_own_process_side_by_side(tmp_path: Path) -> None:
    from roofline_kinds import KIND_ENV, _strip_kinds

    argv = ["--quick", "--kinds", "native", "avx2", "--rounds", "1", "--out", "x.json", "--batches", "1"]
    assert _strip_kinds(argv) == ["--quick", "--batches", "1"]
    out = tmp_path / "kinds.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bench_roofline.py"), "--quick", "--threads", "1", "--bf16", "never"]
    cmd += ["--batches", "1", "--skip-trainer", "--compare-native-loop", "--compare-own-matmul"]
    cmd += ["--kinds", "native", "avx2", "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600, cwd=ROOT)
    report = json.loads(out.read_text())
    own_matmul_runs = portable.own_matmul_rows() > 0 and portable.portable_problem(torch.device("cpu")) is None
    assert set(report["headline"]) == {"native", "avx2"} and report["env"] == KIND_ENV
    for kind in ("native", "avx2"):
        assert set(report["headline"][kind]) == {"decode_b1", "prefill"}
        assert all(v > 0 for v in report["headline"][kind].values())
        assert set(report["kinds"][kind]["fp32_default_over_python_loop"]) == {"b1", "prefill"}
        # agentrl's float32 matmul against torch's, side by side where the portable loop runs (x86-64, AVX2/FMA)
        own = report["kinds"][kind]["fp32_default_over_torch_matmul"]
        if own_matmul_runs:
            assert set(own) == {"b1", "prefill"} and all(v > 0 for v in own.values())
        else:
            assert own is None
    assert set(report["avx2_over_native"]) == {"decode_b1", "prefill"}
