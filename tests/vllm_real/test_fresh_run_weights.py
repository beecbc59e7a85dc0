"""A fresh run samples from its own start weights, not from what an earlier run left on the vLLM server: a first
run moves the weights far (a large learning rate), then a second, fresh run on the same server audits its first
step. Without the start-of-run weight push, the second run's step 1 samples from the first run's last policy
while the trainer computes against the base model (and every token is labelled version 0)."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest
from vllm_server import VLLMServer

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
AUDIT_TOL = 1e-3  # fp32 server against the fp32 trainer on the same weights (test_vllm_train.py's bound)


def _weight_version(url: str) -> str:
    with urllib.request.urlopen(url + "/weight_info", timeout=10) as reply:
        return str(json.loads(reply.read())["weight_version"])


def test_a_fresh_run_after_another_samples_its_own_start_weights(
    vllm_server: VLLMServer, vllm_model_dir: Path, tmp_path: Path
) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from live_train import magic_word_run, step_metrics

    engine = {"kind": "vllm", "urls": [vllm_server.url]}
    first = step_metrics(magic_word_run(tmp_path, vllm_model_dir, engine, "first", steps=2, lr=0.05))
    assert all(r["train/optimizer_steps"] >= 1 for r in first)  # the first run moved the server's weights
    assert _weight_version(vllm_server.url) == "2"

    second = step_metrics(magic_word_run(tmp_path, vllm_model_dir, engine, "second", steps=1, lr=1e-3))
    assert [r["step"] for r in second] == [1]
    assert second[0]["audit/abs_max"] < AUDIT_TOL, second[0]  # sampled from the base model, as the trainer's
    assert _weight_version(vllm_server.url) == "1"
