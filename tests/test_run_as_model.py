"""``model.path`` may name a training run: ``agentrl train`` (a fresh run from it), ``agentrl eval`` and
``agentrl rollout`` load its latest checkpoint's model, whichever part of the run is named, and say so; anything
else is left to the usual checks."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.cli.model_path import with_run_model
from agentrl.job.loader import load_config

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "tiny_debug.yaml"


@pytest.fixture
def run_dir(tiny_model_dir: Path, tmp_path: Path) -> Path:
    """A run directory as training leaves it: two checkpoints, ``latest`` naming the second."""
    run = tmp_path / "run"
    for step in (1, 2):
        ckpt = run / "checkpoints" / f"step_{step:06d}"
        shutil.copytree(tiny_model_dir, ckpt / "model")
        (ckpt / "trainer_state.json").write_text(json.dumps({"step": step, "world_size": 1}))
    (run / "checkpoints" / "latest").write_text("step_000002\n")
    return run


def test_every_name_of_a_run_resolves_to_a_checkpoint_model(run_dir: Path, tiny_model_dir: Path) -> None:
    latest = run_dir / "checkpoints" / "step_000002" / "model"
    for named, expected in [
        (run_dir, latest),
        (run_dir / "checkpoints", latest),
        (run_dir / "checkpoints" / "latest", latest),
        (run_dir / "checkpoints" / "step_000001", run_dir / "checkpoints" / "step_000001" / "model"),
        (tiny_model_dir, tiny_model_dir),  # a model directory stays as it is
        (run_dir / "nothing-here", run_dir / "nothing-here"),  # left to the preflight's own message
    ]:
        cfg = with_run_model(load_config(CONFIG, [f"model.path={named}"]), "test")
        assert Path(cfg.model.path) == expected, named


def _agentrl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentrl.cli.main", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_train_and_eval_take_a_run_directory(run_dir: Path, tmp_path: Path) -> None:
    model = run_dir / "checkpoints" / "step_000002" / "model"
    dry = _agentrl("train", str(CONFIG), f"model.path={run_dir}", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert f"is a training run: using its checkpoint's model {str(model)!r}" in dry.stdout
    evaluated = _agentrl("eval", str(CONFIG), f"model.path={run_dir}", "--limit", "2", cwd=tmp_path)
    assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
    assert f"using its checkpoint's model {str(model)!r}" in evaluated.stdout
    out = tmp_path / "episodes.jsonl"
    rolled = _agentrl("rollout", str(CONFIG), f"model.path={run_dir}", "--out", str(out), "--steps", "1", cwd=tmp_path)
    assert rolled.returncode == 0, rolled.stdout + rolled.stderr
    assert f"[rollout] model.path {str(run_dir)!r} is a training run" in rolled.stdout and out.stat().st_size > 0
