"""docs/scaling-out.md's FSDP2 command, run as written on CPU: ``torchrun --nproc-per-node 2 -m agentrl train CONFIG``.

``AGENTRL_DIST_DEVICE=cuda`` makes the trainer build its process group as on GPUs (``cpu:gloo,cuda:nccl``,
with gloo standing in for NCCL on a CPU build), so a CPU collective a GPU group could not serve fails here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_torchrun_two_processes_train_and_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
    cmd += ["--master-port", str(port), "-m", "agentrl", "train", str(ROOT / "configs" / "tiny_debug.yaml")]
    cmd += [
        f"model.path={tiny_model_dir}",
        "trainer.steps=2",
        "trainer.checkpoint_every_steps=2",
        "logging.run_name=ddp",
    ]
    cmd += [f"logging.run_root={tmp_path}"]
    env = {**os.environ, "AGENTRL_DIST_DEVICE": "cuda", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    run = tmp_path / "ddp"
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # rank 0 logs once per step
    meta = json.loads((run / "checkpoints" / "step_000002" / "trainer_state.json").read_text())
    assert meta["world_size"] == 2 and meta["step"] == 2
    assert sorted(p.name for p in (run / "checkpoints" / "step_000002").glob("training_rank*.pt")) == [
        "training_rank0.pt",
        "training_rank1.pt",
    ]
