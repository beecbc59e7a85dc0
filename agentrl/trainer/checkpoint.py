"""Atomic checkpoints of a run: HF model, optimizer + scheduler, RNG states, step, rollout buffer copy.

``checkpoints/step_XXXXXX/`` holds ``model/`` (the policy's float32 master weights as safetensors, with its
tokenizer: a Hugging Face model directory ``agentrl serve --model`` and ``model.path`` take), ``training_rank<R>.pt``
(AdamW's two float32 moments per weight, twice the model's size, the LR schedule and every RNG state),
``rollout_buffer.sqlite`` (episodes in flight) and ``trainer_state.json`` (step, world size). Each is what an
exact ``--resume`` needs; ``trainer.keep_checkpoints`` (default 1) keeps only the latest.

Invariant: a checkpoint directory either exists complete or not at all (written under a temp name,
fsynced, then renamed), and ``checkpoints/latest`` only ever names a complete one, even after a
power loss (``agentrl.util.disk``). The rollout buffer is copied with SQLite's backup API at the same
step boundary, so a resume restores a consistent pair.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from agentrl.errors import CheckpointError
from agentrl.rollout.buffer import BUFFER_FILE
from agentrl.trainer.distributed import DistInfo
from agentrl.util.disk import fsync_path, publish, write_text_durably


@dataclass
class Checkpoint:
    """A complete checkpoint on disk."""

    path: Path
    step: int
    meta: dict[str, Any]

    @property
    def model_dir(self) -> Path:
        """The Hugging Face model directory (``from_pretrained`` loads it)."""
        return self.path / "model"


def rng_state() -> dict[str, Any]:
    """Every RNG the run draws from: python, numpy, torch CPU and CUDA."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` captured."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# Room kept beyond a checkpoint's own bytes: the rollout buffer's copy, trajectories and logs written meanwhile.
SPACE_MARGIN_BYTES = 256 * 2**20


def checkpoint_bytes(numel: int) -> int:
    """About what one checkpoint of ``numel`` weights takes: float32 weights and AdamW's two float32 moments."""
    return 12 * numel


def require_space(directory: Path, needed: int, what: str) -> None:
    """CheckpointError naming the fix unless the file system holding ``directory`` has ``needed`` bytes free
    (plus ``SPACE_MARGIN_BYTES``): a checkpoint that meets a full disk mid-write kills the run with a cryptic
    error, and everything written after the last checkpoint is lost with it."""
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed + SPACE_MARGIN_BYTES:
        raise CheckpointError(
            f"{what} needs about {(needed + SPACE_MARGIN_BYTES) / 1e9:.2f} GB free on the file system of "
            f"{directory}, which has {free / 1e9:.2f} GB: free space there, keep fewer checkpoints "
            "(trainer.keep_checkpoints), or set logging.run_root to a larger file system"
        )


def require_room_for_checkpoints(run_dir: Path, lm: nn.Module, keep: int) -> None:
    """``require_space`` for a run's ``keep`` checkpoints of ``lm`` and the next one written beside them."""
    numel = sum(p.numel() for p in lm.parameters())
    require_space(run_dir, (keep + 1) * checkpoint_bytes(numel), f"keeping {keep} checkpoint(s) of this model")


def copy_sqlite(src: Path, dst: Path) -> None:
    """A consistent copy of a live (WAL) SQLite database via the backup API."""
    with sqlite3.connect(str(src)) as source, sqlite3.connect(str(dst)) as target:
        source.backup(target)
    source.close()
    target.close()


def save_checkpoint(
    run_dir: Path,
    step: int,
    *,
    lm: nn.Module,
    state: dict[str, torch.Tensor],
    tokenizer: Any,
    training_state: dict[str, Any],
    meta: dict[str, Any],
    keep: int = 2,
    dist: DistInfo = DistInfo(),
) -> Path:
    """Write ``checkpoints/step_XXXXXX`` atomically; every rank writes its optimizer shard first. Refused before
    anything is written when the disk lacks room for it (``require_space``): the last checkpoint stays the latest."""
    root = run_dir / "checkpoints"
    final = root / f"step_{step:06d}"
    tmp = root / f".tmp-step_{step:06d}"
    if dist.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        buffer = run_dir / BUFFER_FILE
        needed = checkpoint_bytes(sum(t.numel() for t in state.values()))
        needed += buffer.stat().st_size if buffer.exists() else 0
        require_space(root, needed, f"the checkpoint of step {step}")
        if not root.exists():
            root.mkdir(parents=True)
            fsync_path(run_dir)  # the new checkpoints/ entry itself must survive a power loss
        tmp.mkdir()
    _barrier(dist)
    training_file = tmp / f"training_rank{dist.rank}.pt"
    torch.save({**training_state, "rng": rng_state()}, training_file)
    fsync_path(training_file)  # by the rank that wrote it: on a shared filesystem only the writer can flush it
    _barrier(dist)
    if dist.is_main:
        lm.save_pretrained(tmp / "model", state_dict={k: v.cpu() for k, v in state.items()}, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp / "model")
        if (run_dir / BUFFER_FILE).exists():
            copy_sqlite(run_dir / BUFFER_FILE, tmp / BUFFER_FILE)
        (tmp / "trainer_state.json").write_text(
            json.dumps({"step": step, "world_size": dist.world_size, **meta}, indent=1)
        )
        shutil.rmtree(final, ignore_errors=True)
        publish(tmp, final)  # every file and directory fsynced, renamed, checkpoints/ fsynced
        write_text_durably(root / "latest", final.name + "\n")
        for old in sorted(p for p in root.glob("step_*") if p.is_dir())[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    _barrier(dist)
    return final


def _barrier(dist: DistInfo) -> None:
    if dist.enabled:
        import torch.distributed as tdist

        tdist.barrier()


def latest_checkpoint(run_dir: Path) -> Checkpoint | None:
    """The checkpoint ``checkpoints/latest`` names, or None when the run has none yet."""
    pointer = run_dir / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    path = run_dir / "checkpoints" / pointer.read_text().strip()
    state_file = path / "trainer_state.json"
    if not state_file.is_file():
        raise CheckpointError(
            f"checkpoint {str(path)!r} named by {str(pointer)!r} is incomplete (no trainer_state.json); "
            "delete the pointer to fall back to a fresh run"
        )
    meta = json.loads(state_file.read_text())
    return Checkpoint(path=path, step=int(meta["step"]), meta=meta)


def model_dir_of(path: str | Path) -> Path:
    """The model directory ``path`` names: a model directory itself, or a run directory, its ``checkpoints``
    folder, its ``checkpoints/latest`` pointer or one ``step_*`` checkpoint (each: that checkpoint's ``model/``)."""
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    if path.name == "latest" and path.is_file():
        path = path.parent.parent
    if (path / "trainer_state.json").is_file():
        return path / "model"
    run_dir = path.parent if path.name == "checkpoints" else path
    ckpt = latest_checkpoint(run_dir)
    if ckpt is None:
        raise CheckpointError(
            f"{str(path)!r} is neither a model directory (no config.json) nor a run directory with a checkpoint; "
            "pass a Hugging Face model directory, a run directory or RUN_DIR/checkpoints/latest"
        )
    return ckpt.model_dir


def load_training_state(ckpt: Checkpoint, dist: DistInfo = DistInfo()) -> dict[str, Any]:
    """This rank's optimizer/scheduler/RNG state of ``ckpt`` (checked against the world size)."""
    if int(ckpt.meta.get("world_size", 1)) != dist.world_size:
        raise CheckpointError(
            f"checkpoint {str(ckpt.path)!r} was written by {ckpt.meta.get('world_size')} processes but "
            f"this run has {dist.world_size}; resume with the same torchrun --nproc-per-node"
        )
    return torch.load(ckpt.path / f"training_rank{dist.rank}.pt", weights_only=False)


def restore_buffer(ckpt: Checkpoint, run_dir: Path) -> None:
    """Put the checkpoint's rollout buffer back in the run dir (dropping the newer WAL/SHM files)."""
    saved = ckpt.path / BUFFER_FILE
    for suffix in ("", "-wal", "-shm"):
        (run_dir / f"{BUFFER_FILE}{suffix}").unlink(missing_ok=True)
    if saved.exists():
        shutil.copyfile(saved, run_dir / BUFFER_FILE)
