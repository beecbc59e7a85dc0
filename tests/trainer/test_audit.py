"""The engine-logprob audit (algorithm.audit_every): it measures the engine-trainer mismatch of a batch
before the update and changes nothing about the update itself."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from trainer_episodes import make_groups

from agentrl.algos.config import AlgorithmConfig
from agentrl.config.sections import TrainerConfig
from agentrl.job.loader import load_config
from agentrl.trainer.batch import build_rows
from agentrl.trainer.logprobs import PolicyLogprobs
from agentrl.trainer.update import PolicyUpdater

SHIFT = 0.01  # the "engine" reports every sampled token's logprob 0.01 too low


def _shifted_groups(lm: torch.nn.Module) -> list[list[Any]]:
    groups = make_groups(lm, [[1.0, 0.0], [0.0, 1.0]], turns=2)
    for ep in (e for g in groups for e in g):
        seg = ep.segments[0]
        seg.logprobs = [lp - SHIFT if m else 0.0 for lp, m in zip(seg.logprobs, seg.loss_mask)]
    return groups


def _update(lm: torch.nn.Module, algo: AlgorithmConfig, audit: bool) -> dict[str, float]:
    updater = PolicyUpdater(
        PolicyLogprobs(lm), algo, TrainerConfig(lr=1e-3, mini_batches=2), temperature=1.0, total_steps=1
    )
    return updater.update(build_rows(_shifted_groups(lm), 2, algo, 0), audit=audit)


def test_audit_reports_the_mismatch_and_leaves_the_update_unchanged(tiny_lm: torch.nn.Module) -> None:
    lm_plain = copy.deepcopy(tiny_lm)
    algo = AlgorithmConfig(audit_every=1, proximal="behaviour")
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        audited = _update(tiny_lm, algo, audit=True)
        plain = _update(lm_plain, algo, audit=False)
    finally:
        torch.use_deterministic_algorithms(was_deterministic)
    for (name, a), b in zip(tiny_lm.state_dict().items(), lm_plain.state_dict().values()):
        assert torch.equal(a, b), name  # bit-identical parameters: the audit touched neither pi_old nor the RNG
    timing = ("train/time_s", "train/tokens_per_s")
    assert {k: v for k, v in audited.items() if k.startswith("train/") and k not in timing} == {
        k: v for k, v in plain.items() if k.startswith("train/") and k not in timing
    }
    assert not any(k.startswith("audit/") for k in plain)
    assert audited["audit/abs_mean"] == pytest.approx(SHIFT, abs=1e-4)
    assert audited["audit/abs_max"] == pytest.approx(SHIFT, abs=1e-4)
    assert audited["audit/turn0/abs_mean"] == pytest.approx(SHIFT, abs=1e-4)
    assert audited["audit/turn1/abs_max"] == pytest.approx(SHIFT, abs=1e-4)
    assert audited["audit/pre_update_abs_log_s_p50"] == pytest.approx(SHIFT, abs=1e-4)
    # log s = +0.01 > eps_high: the loss would clip the A > 0 rows (half the sequences) before any update
    assert audited["audit/pre_update_clip_frac_seq"] == pytest.approx(0.5)
    assert 0.0 < audited["audit/pre_update_clip_frac_token"] < 1.0
    # and training still ran on the engine logprobs: mini-batch 0 sees the shift, not a recomputed pi_old
    assert audited["train/mb0_abs_log_s_p50"] == pytest.approx(SHIFT, abs=1e-4)


def test_audit_steps_follow_audit_every() -> None:
    assert [s for s in range(1, 9) if AlgorithmConfig(audit_every=3).audit_due(s)] == [1, 4, 7]
    assert not any(AlgorithmConfig().audit_due(s) for s in range(1, 9))  # 0 = off


def test_training_logs_the_audit_every_k_steps(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agentrl.trainer.loop import train

    config = {
        "model": {"path": str(tiny_model_dir), "device": "cpu"},
        "engine": {"kind": "embedded", "max_batch_size": 8, "max_seq_len": 256},
        "env": {"id": "agentrl/MagicWord-v0", "kwargs": {"word": "please", "turns": 2}},
        "rollout": {
            "group_size": 2,
            "prompts_per_step": 2,
            "partial_rollout": False,
            "max_new_tokens": 6,
            "max_episode_tokens": 256,
        },
        "algorithm": {"audit_every": 2, "proximal": "behaviour"},
        "trainer": {
            "steps": 3,
            "lr": 1e-2,
            "mini_batches": 1,
            "checkpoint_every_steps": 3,
            "gradient_checkpointing": False,
        },
        "logging": {"run_root": str(tmp_path / "runs"), "wandb_mode": "disabled", "progress": False},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir = train(load_config(path, ["logging.run_name=audit"]), config_name="run")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    audited = [r["step"] for r in records if "audit/abs_mean" in r]
    assert audited == [1, 3]
    # the embedded engine and the trainer share the forward: their logprobs agree to float noise
    assert all(r["audit/abs_max"] < 1e-3 for r in records if "audit/abs_max" in r)
    assert (run_dir / "plots.png").stat().st_size > 0
