"""configs/bfcl_multi_turn.yaml end to end with the tiny model: `agentrl eval` reports BFCL accuracy, `train` runs.

The tiny model's context is widened for BFCL's long prompts (the function docs: 6-13k tiny-tokenizer tokens).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bfcl_harness import require_bfcl

from agentrl.cli.main import main

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "bfcl_multi_turn.yaml"


@pytest.fixture(scope="module")
def long_tiny_model(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with a 16k context (its rotary embedding extends; 4096 holds no BFCL prompt)."""
    model_dir = tmp_path_factory.mktemp("tiny-16k")
    shutil.copytree(tiny_model_dir, model_dir, dirs_exist_ok=True)
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 16384}))
    return model_dir


def tiny_overrides(model_dir: Path, tmp_path: Path) -> list[str]:
    return [
        f"model.path={model_dir}",
        "engine.max_seq_len=16384",
        "rollout.max_episode_tokens=16000",
        "rollout.max_new_tokens=8",
        "env.kwargs.max_turns=6",
        f"logging.run_root={tmp_path / 'runs'}",
    ]


@pytest.mark.slow
def test_eval_reports_bfcl_accuracy(long_tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require_bfcl()
    out = tmp_path / "report.json"
    argv = ["eval", str(CONFIG), *tiny_overrides(long_tiny_model, tmp_path), "--split", "test", "--limit", "2"]
    assert main([*argv, "--temperature", "0", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert "agentrl/BFCL-MultiTurn-v0: pass@1" in capsys.readouterr().out
    assert [task["task_id"] for task in report["tasks"]] == ["multi_turn_base_0", "multi_turn_base_5"]  # test split
    assert report["failed_episodes"] == 0 and all(not task["errors"] for task in report["tasks"])
    # A reply without a call ends a user turn: the random model walks through the entry's 4 turns, ungraded 0.
    assert report["behaviour"]["turns_mean"] == 4.0 and report["pass_at_k"] == {"1": 0.0}


@pytest.mark.slow
def test_train_runs_two_steps(long_tiny_model: Path, tmp_path: Path) -> None:
    require_bfcl()
    argv = ["train", str(CONFIG), *tiny_overrides(long_tiny_model, tmp_path)]
    overrides = [
        "trainer.steps=2",
        "trainer.checkpoint_every_steps=2",
        "trainer.gradient_checkpointing=false",
        "rollout.group_size=2",
        "rollout.prompts_per_step=1",
        "eval.splits=[]",
        "logging.run_name=bfcl",
    ]
    assert main([*argv, *overrides]) == 0
    run_dir = tmp_path / "runs" / "bfcl"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 2
    assert (run_dir / "checkpoints" / "step_000002" / "model" / "model.safetensors").exists()
