"""Checkpoint cost (one JSON object on stdout): how long ``save_checkpoint`` takes on a real model, how much of it
is fsync, and how many bytes it writes; the number that sets ``trainer.checkpoint_every_steps`` and
``checkpoint_every_s``.

The policy is the model directory given (fp32 master weights, as the trainer holds them) with an AdamW
state filled by one optimizer step, so the checkpoint is as large as a training run's. Each repetition
writes a new step directory exactly as the training loop does (model, optimizer, RNG, a rollout-buffer
copy, fsync, rename, ``latest``, pruning to ``keep`` = 1).

    python bench/bench_checkpoint.py --model models/smollm2-135m-instruct     # the main job's model
    python bench/bench_checkpoint.py --model DIR --repeats 1 --out-dir /tmp/x  # a quick run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch


def _policy(model_dir: str) -> tuple[torch.nn.Module, torch.optim.Optimizer, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    optimizer = torch.optim.AdamW(lm.parameters(), lr=1e-6)
    lm(input_ids=torch.tensor([[1, 2, 3, 4]])).logits.float().mean().backward()
    optimizer.step()  # AdamW's two moments now exist: the checkpoint is full size
    optimizer.zero_grad(set_to_none=True)
    return lm, optimizer, AutoTokenizer.from_pretrained(model_dir)


class _FsyncClock:
    """Wraps os.fsync to add up the seconds spent in it (the durability cost)."""

    def __init__(self) -> None:
        self.seconds, self.calls, self._real = 0.0, 0, os.fsync

    def __call__(self, fd: int) -> None:
        started = time.perf_counter()
        self._real(fd)
        self.seconds += time.perf_counter() - started
        self.calls += 1


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(model_dir: str, repeats: int, out_dir: Path) -> dict[str, Any]:
    """Time ``repeats`` checkpoints of the model into ``out_dir`` (a run directory)."""
    from agentrl.rollout.buffer import BUFFER_FILE, RolloutBuffer
    from agentrl.trainer.checkpoint import save_checkpoint
    from agentrl.trainer.distributed import full_state_dict

    lm, optimizer, tokenizer = _policy(model_dir)
    RolloutBuffer(out_dir / BUFFER_FILE).close()
    clock = _FsyncClock()
    os.fsync = clock  # type: ignore[assignment]
    seconds, fsync_seconds = [], []
    try:
        for step in range(1, repeats + 1):
            before = clock.seconds
            started = time.perf_counter()
            save_checkpoint(
                out_dir,
                step,
                lm=lm,
                state=full_state_dict(lm),
                tokenizer=tokenizer,
                training_state={"optimizer": optimizer.state_dict()},
                meta={"model_path": model_dir},
                keep=1,
            )
            seconds.append(time.perf_counter() - started)
            fsync_seconds.append(clock.seconds - before)
    finally:
        os.fsync = clock._real  # type: ignore[assignment]
    final = out_dir / "checkpoints" / f"step_{repeats:06d}"
    return {
        "model": model_dir,
        "params": sum(p.numel() for p in lm.parameters()),
        "checkpoint_bytes": _tree_bytes(final),
        "repeats": repeats,
        "save_s": [round(s, 3) for s in seconds],
        "save_s_median": round(sorted(seconds)[len(seconds) // 2], 3),
        "fsync_s": [round(s, 3) for s in fsync_seconds],
        "fsync_calls_per_save": clock.calls // repeats,
        "fsync_share": round(sum(fsync_seconds) / sum(seconds), 3),
    }


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="Hugging Face model directory (e.g. agentrl make-model output)")
    parser.add_argument("--repeats", type=int, default=3, help="checkpoints to write (default 3)")
    parser.add_argument("--out-dir", help="run directory to write into (default: a temp dir, removed afterwards)")
    args = parser.parse_args(argv)
    out_dir = Path(args.out_dir or tempfile.mkdtemp(prefix="bench-checkpoint-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        report = run(args.model, args.repeats, out_dir)
    finally:
        if args.out_dir is None:
            shutil.rmtree(out_dir, ignore_errors=True)
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
