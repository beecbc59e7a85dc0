"""bench/studies/bench_length_bias.py on the tiny job: all three modes collect the same number of groups, and each
partial mode reports its length shift and step-time ratio against synchronous collection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from learning_helpers import run_script

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def test_length_bias_modes(tiny_job: Path, tmp_path: Path) -> None:
    report = json.loads(run_script("studies/bench_length_bias.py", "--config", str(tiny_job), "--steps", "2"))
    modes = report["modes"]
    assert set(modes) == {"sync", "partial_finish", "partial_start"}
    assert {m["groups_trained"] for m in modes.values()} == {4}  # B = 2 groups per step, 2 steps, in every mode
    for name in ("partial_finish", "partial_start"):
        lo, hi = modes[name]["mean_tokens_minus_sync_ci95"]
        assert lo <= modes[name]["mean_tokens_minus_sync"] <= hi and modes[name]["step_time_vs_sync"] > 0
