"""The prepared device check runs here on the CPU (tiny shape), so a GPU session can spend its minutes measuring."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_device_check_runs_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    out = tmp_path / "device.json"
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / "bench_device.py"),
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
    decode, train = report["decode"], report["train_step"]
    assert decode["lean_forward"] and decode["embedded_tok_s"] > 0 and decode["hf_generate_tok_s"] > 0
    assert decode["logprob_gap_vs_hf_forward"]["max"] < 1e-4  # fp32 on the CPU: the engine's logprobs are HF's
    assert train["tokens_per_s"] > 0 and train["params"] > 0 and train["mfu"] is None  # no MFU without a known peak
