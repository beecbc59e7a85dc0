"""A training run's directory where a model directory is asked for: ``model.path`` of ``agentrl train`` (a fresh run)
and ``agentrl eval`` may name a run, its ``checkpoints`` folder, ``checkpoints/latest`` or one ``step_*``
checkpoint; the command then loads that checkpoint's model, as ``agentrl serve --model`` does."""

from __future__ import annotations

from pathlib import Path

from agentrl.job.run_config import RunConfig
from agentrl.trainer.checkpoint import model_dir_of


def names_a_run(path: Path) -> bool:
    """Whether ``path`` is a run directory or a part of one rather than a model directory (or nothing)."""
    if (path / "config.json").is_file():
        return False
    return (
        (path / "checkpoints").is_dir()
        or (path / "trainer_state.json").is_file()
        or (path.name == "latest" and path.parent.name == "checkpoints")
        or (path.name == "checkpoints" and path.is_dir())
    )


def with_run_model(cfg: RunConfig, command: str) -> RunConfig:
    """``cfg`` with ``model.path`` resolved to a checkpoint's model directory when it names a run (said once on
    stdout, and what the run's saved config records); otherwise ``cfg`` unchanged (the preflight checks it)."""
    path = Path(cfg.model.path)
    if not names_a_run(path):
        return cfg
    model_dir = model_dir_of(path)
    print(f"[{command}] model.path {str(path)!r} is a training run: using its checkpoint's model {str(model_dir)!r}")
    cfg.model.path = str(model_dir)
    return cfg
