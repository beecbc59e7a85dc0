"""FSDP2 under torchrun with 2 CPU processes: same loss and parameters as one process.

The process group is selected by the same code as on GPUs (``AGENTRL_DIST_DEVICE=cuda`` forces the CUDA
device map; a CPU build of torch maps the accelerator to gloo), so a collective on a CPU tensor that a
GPU run's group could not serve fails here too.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentrl.trainer.distributed import DEVICE_ENV, process_group_backend

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["plain", "decoupled"])
def test_fsdp2_two_processes_match_single_process(tiny_model_dir: Path, tmp_path: Path, objective: str) -> None:
    """``decoupled``: the bundled objective (recompute_stale + tis) with unequal shares, so one rank trains a
    dummy micro-batch, which must carry behaviour logprobs (it raised there and the other rank hung)."""
    from fsdp_worker import main as worker_main
    from transformers import AutoModelForCausalLM

    single = tmp_path / "single.json"
    worker_main(str(tiny_model_dir), str(single), objective)
    dual = tmp_path / "dual.json"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        str(HERE / "fsdp_worker.py"),
        str(tiny_model_dir),
        str(dual),
        objective,
    ]
    # PYTHONFAULTHANDLER: should a rank abort, its Python stack is in the failure message
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", DEVICE_ENV: "cuda", "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = json.loads(single.read_text()), json.loads(dual.read_text())
    assert b["world"] == 2
    if objective == "decoupled":
        assert b["micro_batches_per_rank"] == [2, 1]  # rank 1 pads with a dummy micro-batch
        assert b["metrics"]["train/recomputed_rows"] == a["metrics"]["train/recomputed_rows"] == 3
    assert b["backend"] == process_group_backend("cuda", native_available=False) == "cpu:gloo,cuda:gloo"
    for key in ("train/loss", "train/grad_norm", "train/abs_log_s_mean", "train/entropy", "train/trained_tokens"):
        assert b["metrics"][key] == pytest.approx(a["metrics"][key], rel=1e-4, abs=1e-7), key
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    sa, sb = torch.load(str(single) + ".pt"), torch.load(str(dual) + ".pt")
    moved = max((sa[k] - base[k]).abs().max().item() for k in sa)
    diff = max((sa[k] - sb[k]).abs().max().item() for k in sa)
    assert moved > 5e-4  # the step really changed the weights ...
    assert diff < 5e-5  # ... and both runs changed them the same way


def test_gpu_process_group_serves_cpu_collectives() -> None:
    """NCCL has no CPU collectives: the CUDA group must name a CPU backend too."""
    assert process_group_backend("cuda") == "cpu:gloo,cuda:nccl"
    assert process_group_backend("cpu") == "cpu:gloo"
    with pytest.raises(ValueError, match="xpu"):
        process_group_backend("xpu")


def test_close_distributed_leaves_the_group_and_is_a_no_op_without_one(tmp_path: Path) -> None:
    import torch.distributed as tdist

    from agentrl.trainer.distributed import close_distributed

    close_distributed()  # no group: nothing to do, nothing raised
    store = tdist.FileStore(str(tmp_path / "store"), 1)
    tdist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        close_distributed()
        assert not tdist.is_initialized()  # torn down now, not in interpreter finalisation (pytorch#190489)
    finally:
        if tdist.is_initialized():
            tdist.destroy_process_group()


_MESH_SURVIVES = """
import gc, sys
import torch, torch.distributed as tdist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from agentrl.trainer.distributed import close_distributed
tdist.init_process_group("gloo", store=tdist.FileStore(sys.argv[1], 1), rank=0, world_size=1)
layer = torch.nn.Linear(4, 4)
fully_shard(layer)
layer(torch.randn(2, 4)).sum().backward()
del layer
close_distributed()
print(sum(isinstance(o, DeviceMesh) for o in gc.get_objects()))
"""


def test_close_distributed_frees_the_fsdp_mesh_and_with_it_the_group(tmp_path: Path) -> None:
    # DTensor's sharding-propagation caches hold the mesh, whose group then outlives destroy_process_group
    # and is torn down during interpreter finalisation (the gloo abort pytorch#190489 describes).
    # A fresh interpreter: an earlier test's meshes in this one would count too.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-c", _MESH_SURVIVES, str(tmp_path / "store")]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "0", proc.stdout
