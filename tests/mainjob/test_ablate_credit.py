"""bench/studies/ablate_credit.py end to end on the tiny model: real ``agentrl train`` runs, results, resume,
plots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentrl.job.loader import load_config

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "studies"))

from ablate_credit import ARMS, check_arms, clip_when_stepped_twice, summarise  # noqa: E402

pytestmark = pytest.mark.bench  # runs a benchmark or study of bench/


def test_every_arm_is_a_valid_variant_of_the_main_job() -> None:
    expected = {
        "outcome": ("gspo_token", "outcome"),
        "outcome_plus_turn": ("gspo_token", "outcome_plus_turn"),
        "discounted_return": ("gspo_token", "discounted_return"),
        "grpo": ("grpo", "outcome"),
    }
    for arm, overrides in ARMS.items():
        algo = load_config(ROOT / "configs" / "quickstart.yaml", overrides).algorithm
        assert (algo.loss.kind, algo.turn_advantage.kind) == expected[arm], arm
    grpo = load_config(ROOT / "configs" / "quickstart.yaml", ARMS["grpo"]).algorithm.loss
    assert (grpo.eps_low, grpo.eps_high) == (0.2, 0.28)
    lam = load_config(ROOT / "configs" / "quickstart.yaml", ARMS["outcome_plus_turn"]).algorithm.turn_advantage.lam
    assert lam <= 1.0


def test_the_clipping_arms_warn_when_one_mini_batch_leaves_nothing_to_clip() -> None:
    config = str(ROOT / "configs" / "quickstart.yaml")
    warnings = check_arms(config, ["trainer.mini_batches=1"], ["outcome", "grpo"])
    assert len(warnings) == 2 and all("trainer.mini_batches=2" in w for w in warnings)
    assert check_arms(config, ["trainer.mini_batches=2"], ["outcome", "grpo"]) == []
    # Without GRPO there is no clipping comparison: the credit arms keep the main job's single mini-batch.
    assert check_arms(config, ["trainer.mini_batches=1"], ["outcome", "outcome_plus_turn"]) == []
    with pytest.raises(SystemExit, match="arm 'grpo' does not make a valid config"):
        check_arms(config, ["trainer.mini_batches=0"], ["grpo"])


def test_held_out_change_is_paired_within_each_run() -> None:
    # Two seeds start 0.3 apart; both gain 0.1. The absolute curves' spread is the start, the change's is 0.
    runs = [
        {"arm": "outcome", "seed": seed, "wall_s": 1.0, "curves": {"test_kinds/pass@1": {"0": start, "2": start + 0.1}}}
        for seed, start in ((0, 0.2), (1, 0.5))
    ]
    curves = summarise(runs)["outcome"]["curves"]
    assert curves["test_kinds/pass@1"]["2"]["max"] - curves["test_kinds/pass@1"]["2"]["min"] == pytest.approx(0.3)
    change = curves["test_kinds/pass@1 change"]
    assert change["0"]["mean"] == 0.0 and change["2"] == pytest.approx({"mean": 0.1, "min": 0.1, "max": 0.1, "n": 2})


def test_clipping_is_compared_on_updates_that_took_two_optimizer_steps() -> None:
    def run(arm: str, clip: dict[str, float], steps: dict[str, float]) -> dict:
        curves = {"train/clip_frac_token": clip, "train/optimizer_steps": steps}
        return {"arm": arm, "seed": 0, "wall_s": 1.0, "curves": curves}

    # Step 2 of the GSPO-token run took one optimizer step (its second mini-batch had no signal): its 0 is left out.
    gspo = run("outcome", {"1": 0.3, "2": 0.0}, {"1": 2.0, "2": 1.0})
    grpo = run("grpo", {"1": 0.01, "2": 0.002}, {"1": 2.0, "2": 2.0})
    assert clip_when_stepped_twice([gspo]) == {"clip_frac_token": 0.3, "steps": 1}
    clipping = summarise([gspo, grpo])["clipping"]
    assert clipping["grpo"] == pytest.approx({"clip_frac_token": 0.006, "steps": 2})
    assert clipping["ratio_gspo_token_over_grpo"] == pytest.approx(50.0)
    # No update with two optimizer steps in an arm: no clipping comparison at all, rather than a ratio of zeros.
    assert "clipping" not in summarise([run("outcome", {"1": 0.0}, {"1": 1.0}), grpo])


def _tiny_agent_config(tmp_path: Path, model_dir: Path) -> Path:
    data = {
        "model": {"path": str(model_dir), "device": "cpu"},
        "engine": {"kind": "embedded", "max_batch_size": 4, "max_seq_len": 1024},
        "env": {
            "id": "agentrl/CodeAgent-v0",
            "kwargs": {
                "tasks": {"seed": 0, "families": ["arith", "predicates"], "heldout_families": ["predicates"]},
                "max_turns": 2,
                "sandbox": {"kind": "process"},
            },
        },
        "rollout": {"group_size": 2, "prompts_per_step": 1, "max_new_tokens": 8, "max_episode_tokens": 900},
        "trainer": {
            "steps": 2,
            "lr": 1e-3,
            "mini_batches": 1,
            "checkpoint_every_steps": 1,
            "gradient_checkpointing": False,
        },
        "eval": {"splits": ["test_kinds", "test_instances"], "samples": 1, "max_tasks": 1},
        "logging": {"wandb_mode": "disabled", "progress": False},
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _ablate(config: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "studies" / "ablate_credit.py"),
        str(config),
        "--out",
        str(out),
        *extra,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_ablation_runs_arms_over_seeds_and_resumes(tiny_model_dir: Path, tmp_path: Path) -> None:
    config, out = _tiny_agent_config(tmp_path, tiny_model_dir), tmp_path / "ablation"
    done = _ablate(config, out, "--arms", "outcome,grpo", "--seeds", "0", "--eval-every", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING: arm 'grpo' trains with trainer.mini_batches=1" in done.stderr
    for arm in ("outcome", "grpo"):
        result = json.loads((out / "results" / f"{arm}-s0.json").read_text())
        for split in ("test_kinds", "test_instances"):
            assert list(result["curves"][f"{split}/pass@1"]) == ["0", "1", "2"]  # before, every step, after
        assert list(result["curves"]["train/clip_frac_token"]) == ["1", "2"]
    summary = json.loads((out / "ablation.json").read_text())
    assert summary["outcome"]["seeds"] == [0] and summary["grpo"]["seeds"] == [0]
    assert (out / "credit.png").stat().st_size > 0 and (out / "clipping.png").stat().st_size > 0

    # A rerun trains nothing: every (arm, seed) already has its result.
    again = _ablate(config, out, "--arms", "outcome,grpo", "--seeds", "0")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "[ablate] outcome-s0: " not in again.stdout and "done in" not in again.stdout

    wrong = _ablate(config, out, "--arms", "outcome,ppo")
    assert wrong.returncode != 0 and "unknown arms ['ppo']" in wrong.stderr
