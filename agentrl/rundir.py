"""Run directories, made in one place: ``agentrl train`` and ``agentrl rollout`` both start and resume runs here.

A new run gets ``logging.run_root/<logging.run_name, else <config stem>-<YYYYmmdd-HHMMSS>>``. A
directory that already holds a run (a ``checkpoints/`` folder or a rollout buffer) is never reused
silently: continuing it takes ``--resume DIR``, so two jobs never write into one run by accident.
"""

from __future__ import annotations

import time
from pathlib import Path

from agentrl.config.sections import LoggingConfig
from agentrl.errors import ConfigError
from agentrl.rollout.buffer import BUFFER_FILE

CHECKPOINTS_DIR = "checkpoints"  # written by agentrl.trainer.checkpoint


def holds_run(run_dir: Path) -> bool:
    """True when ``run_dir`` already has checkpoints or a rollout buffer."""
    return (run_dir / CHECKPOINTS_DIR).exists() or (run_dir / BUFFER_FILE).exists()


def new_run_dir(logging: LoggingConfig, config_name: str) -> Path:
    """Create the directory of a new run; ConfigError when it already holds one."""
    name = logging.run_name or f"{config_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = Path(logging.run_root) / name
    if holds_run(run_dir):
        raise ConfigError(
            f"run directory {str(run_dir)!r} already holds a run ({CHECKPOINTS_DIR}/ or {BUFFER_FILE}); pass --resume "
            f"{run_dir} to continue it or choose another logging.run_name"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def resumed_run_dir(path: str | Path, *, needs: str, command: str) -> Path:
    """The directory ``--resume`` names; ConfigError when it lacks ``needs`` (a file the command resumes from)."""
    run_dir = Path(path)
    if not (run_dir / needs).exists():
        raise ConfigError(
            f"--resume {str(path)!r}: no {needs} in that directory; pass the RUN_DIR a previous `{command}` printed"
        )
    return run_dir
