"""Fixtures of the learning-benchmark smoke tests: a tiny single-turn coding job (the tiny random model, the
bundled easy tasks, the process sandbox) that each script runs end to end in seconds."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

# the tests import learning_helpers; pytest's importlib mode does not put this folder on sys.path by itself
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture()
def tiny_job(tmp_path: Path, tiny_model_dir: Path) -> Path:
    """A single-turn CodeExec run config on the tiny model: 2 prompts x 2 samples, 8 new tokens, 1 step."""
    data: dict[str, Any] = {
        "model": {"path": str(tiny_model_dir), "device": "cpu", "dtype": "float32"},
        "engine": {"kind": "embedded", "max_batch_size": 8, "max_seq_len": 1024},
        "env": {
            "id": "agentrl/CodeExec-v0",
            "kwargs": {"tasks": "easy", "split": "train", "max_turns": 1, "sandbox": {"kind": "process"}},
        },
        "rollout": {
            "group_size": 2,
            "prompts_per_step": 2,
            "over_sample": 1.5,
            "max_new_tokens": 8,
            "max_episode_tokens": 1024,
            "temperature": 1.0,
            "stop": ["\n```\n"],
        },
        "algorithm": {"loss": "gspo_token"},
        "trainer": {"steps": 1, "lr": 1e-4, "mini_batches": 1, "micro_batch_tokens": 2048, "checkpoint_every_steps": 1},
        "eval": {"splits": ["test_instances"], "samples": 2, "temperature": 1.0, "max_tasks": 2, "concurrency": 4},
        "logging": {"run_root": str(tmp_path / "runs"), "wandb_mode": "disabled", "progress": False},
    }
    path = tmp_path / "tiny_single.yaml"
    path.write_text(yaml.safe_dump(data))
    return path
