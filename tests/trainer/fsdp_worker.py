"""Worker of the FSDP2 test: one policy update on hand-built episodes; rank 0 writes loss and parameters.

Run directly (one process) or under ``torchrun --nproc-per-node 2``; with ``AGENTRL_DIST_DEVICE=cuda`` the
process group is built by the GPU backend selection (``cpu:gloo,cuda:<gloo for nccl>`` on a CPU build).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from agentrl.trainer.distributed import DistInfo


def main(model_dir: str, out_path: str) -> None:
    """Join the group, update once, leave the group after the sharded model is gone (as ``train`` does)."""
    from agentrl.trainer.distributed import close_distributed, init_distributed

    _update_and_dump(model_dir, out_path, init_distributed())
    close_distributed()


def _update_and_dump(model_dir: str, out_path: str, dist: DistInfo) -> None:
    """Build, optionally shard, update once, dump results."""
    from transformers import AutoModelForCausalLM

    from agentrl.config.sections import AlgorithmConfig, TrainerConfig
    from agentrl.trainer.batch import build_rows
    from agentrl.trainer.distributed import decoder_layers_of, full_state_dict, shard_policy
    from agentrl.trainer.logprobs import PolicyLogprobs
    from agentrl.trainer.update import PolicyUpdater

    sys.path.insert(0, str(Path(__file__).parent))
    from trainer_episodes import make_groups

    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    groups = make_groups(
        lm, [[1.0, 0.0, 0.5, 0.2], [0.3, 0.9, 0.1, 0.4], [0.0, 1.0, 1.0, 0.0], [0.7, 0.2, 0.2, 0.6]], turns=2
    )
    for ep in (e for g in groups for e in g):  # engine logprobs slightly off, so the ratio and clipping are exercised
        seg = ep.segments[0]
        seg.logprobs = [
            lp - 0.002 * (i % 3) if m else 0.0 for i, (lp, m) in enumerate(zip(seg.logprobs, seg.loss_mask))
        ]
    policy = PolicyLogprobs(lm, chunk_tokens=16)
    if dist.enabled:
        shard_policy(policy, decoder_layers_of(lm))
    algo = AlgorithmConfig(loss={"name": "gspo_token", "eps_low": 0.2, "eps_high": 0.28})
    updater = PolicyUpdater(
        policy,
        algo,
        TrainerConfig(lr=1e-3, mini_batches=2, micro_batch_tokens=96),
        temperature=1.0,
        total_steps=1,
        dist=dist,
    )
    metrics = updater.update(build_rows(groups, 4, algo, current_version=0))
    state = full_state_dict(lm)
    if dist.is_main:
        params = {k: v.double().sum().item() for k, v in state.items()}
        backend = None
        if dist.enabled:
            import torch.distributed as tdist

            backend = str(tdist.get_backend())
        report = {"metrics": metrics, "params": params, "world": dist.world_size, "backend": backend}
        Path(out_path).write_text(json.dumps(report))
        torch.save(state, out_path + ".pt")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
