"""The prepared device check runs here on the CPU (tiny shape), so a GPU session can spend its minutes measuring."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/

ROOT = Path(__file__).resolve().parents[1]


def test_device_check_runs_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "device.json"
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "bench_device.py"),
        "--device",
        "cpu",
        "--shape",
        "tiny",
        "--batch",
        "4",
        "--prompt-tokens",
        "16",
        "--new-tokens",
        "12",
        "--train-batch",
        "2",
        "--train-seq",
        "96",
        "--train-repeats",
        "1",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300, cwd=ROOT)
    report = json.loads(out.read_text())
    decode, train, fsdp = report["decode"], report["train_step"], report["fsdp"]
    assert decode["lean_forward"] and decode["embedded_tok_s"] > 0 and decode["hf_generate_tok_s"] > 0
    # fp32 on the CPU: the engine's logprobs are the trainer's own (PolicyLogprobs over the same weights)
    assert decode["logprob_gap_vs_trainer"]["max"] < 1e-4 and decode["logprob_gap_vs_trainer"]["tokens"] == 12
    assert train["tokens_per_s"] > 0 and train["params"] > 0 and train["mfu"] is None  # no MFU without a known peak
    assert train["completion_tokens_per_s"] == pytest.approx(train["tokens_per_s"] * (96 - 1 - 63) / 96)
    # the torchrun path: 2 processes through the trainer's CUDA backend map (gloo standing in for NCCL here)
    assert fsdp["ok"] and fsdp["world"] == 2 and fsdp["backend"] == "cpu:gloo,cuda:gloo" and fsdp["step_s"] > 0
