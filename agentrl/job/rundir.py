"""Run directories, made in one place: ``agentrl train`` and ``agentrl rollout`` both start and resume runs here.

A new run gets ``logging.run_root/<logging.run_name, else <config stem>-<YYYYmmdd-HHMMSS>>``. A
directory that already holds a run (a ``checkpoints/`` folder or a rollout buffer) is never reused
silently: continuing it takes ``--resume DIR``, so two jobs never write into one run by accident.
An unnamed run claims its directory with an atomic ``mkdir``; jobs of a sweep started in the same
second get ``-2``, ``-3``, ... instead of sharing one directory (and one rollout buffer).
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
    """Create the directory of a new run; ConfigError when a named one already holds a run."""
    if not logging.run_name:
        return _claim_timestamped(Path(logging.run_root), f"{config_name}-{time.strftime('%Y%m%d-%H%M%S')}")
    run_dir = Path(logging.run_root) / logging.run_name
    if holds_run(run_dir):
        raise ConfigError(
            f"run directory {str(run_dir)!r} already holds a run ({CHECKPOINTS_DIR}/ or {BUFFER_FILE}); pass --resume "
            f"{run_dir} to continue it or choose another logging.run_name"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def _claim_timestamped(root: Path, stem: str, tries: int = 1000) -> Path:
    """``root/stem``, else the first free ``root/stem-N``: mkdir either creates the directory or fails, never both."""
    root.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, tries + 1):
        run_dir = root / (stem if attempt == 1 else f"{stem}-{attempt}")
        try:
            run_dir.mkdir()
        except FileExistsError:
            continue
        return run_dir
    raise ConfigError(f"{tries} runs named {stem!r} already exist under {str(root)!r}; set logging.run_name")


def resumed_run_dir(path: str | Path, *, needs: str, command: str) -> Path:
    """The directory ``--resume`` names; ConfigError when it lacks ``needs`` (a file the command resumes from)."""
    run_dir = Path(path)
    if not (run_dir / needs).exists():
        raise ConfigError(
            f"--resume {str(path)!r}: no {needs} in that directory; pass the RUN_DIR a previous `{command}` printed"
        )
    return run_dir
