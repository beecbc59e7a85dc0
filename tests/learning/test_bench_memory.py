"""bench/bench_memory.py: the step comparison (small shape) and the per-phase job profile (tiny job)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from learning_helpers import run_script

from agentrl.util.allocator import find_tcmalloc

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def test_step_options_side_by_side() -> None:
    args = ["--arch", "small", "--batch", "4", "--prompt", "32", "--completion", "32", "--repeats", "1"]
    options = "baseline,checkpointing,shared_prefix,checkpointing_shared_mask,shared_keep_1536"
    report = json.loads(run_script("bench/bench_memory.py", *args, "--options", options))
    base, ckpt, shared = (report["options"][k] for k in ("baseline", "checkpointing", "shared_prefix"))
    assert base["peak_vs_baseline"] == 1.0 and ckpt["gradient_checkpointing"] is True
    for option in (base, ckpt, shared):
        assert option["peak_gb"] >= option["state_gb"] > option["model_gb"] > 0.1 and option["update_s"] > 0
    # groups of 4 rows share their 32 prompt tokens: forwarded once, 3 x 31 fewer tokens per group
    assert shared["pack_shared_prompts"] is True and shared["forward_tokens"] == base["forward_tokens"] - 3 * 31
    masked = report["options"]["checkpointing_shared_mask"]  # the same packed rows, SDPA over the whole mask
    assert masked["packed_attention"] == "mask" and masked["forward_tokens"] == shared["forward_tokens"]
    kept = report["options"]["shared_keep_1536"]  # micro-batches far below 1536 tokens: no layer recomputes
    assert kept["keep_activations_tokens"] == 1536 and kept["recomputed_layers"] == 0.0
    assert ckpt["recomputed_layers"] is None  # plain checkpointing does not choose layers


def test_job_profile_has_every_phase(tiny_job: Path, tmp_path: Path) -> None:
    args = ["job", "--config", str(tiny_job), "--steps", "1", "--run-root", str(tmp_path / "runs")]
    report = json.loads(
        run_script("bench/bench_memory.py", *args, "--option", "ckpt=trainer.gradient_checkpointing=true")
    )
    job = report["options"]["ckpt"]
    assert set(job["phase_peak_gb"]) == {"load", "rollout", "update", "sync", "checkpoint"}
    assert job["peak_gb"] >= max(job["phase_peak_gb"].values()) > 0.1 and len(job["step_s"]) == 1
    assert job["allocator"] == _commands_allocator()  # measured on what the agentrl command runs on


def _commands_allocator() -> str:
    wanted = os.environ.get("AGENTRL_ALLOCATOR", "auto") != "system"
    return "tcmalloc" if wanted and find_tcmalloc() is not None else "system"


def test_job_profile_with_eval_records_both_evaluations(tiny_job: Path, tmp_path: Path) -> None:
    args = ["job", "--config", str(tiny_job), "--steps", "1", "--run-root", str(tmp_path / "runs"), "--eval"]
    job = json.loads(run_script("bench/bench_memory.py", *args))["options"]["baseline"]
    evals = [p for p in job["phases"] if p["phase"] == "eval"]
    assert len(evals) == 2 and all(p["peak_gb"] > 0.1 and p["s"] > 0 for p in evals)  # before and after
