"""Worker of the FSDP2 test: one policy update on hand-built episodes; rank 0 writes loss and parameters.

Run directly (one process) or under ``torchrun --nproc-per-node 2``; with ``AGENTRL_DIST_DEVICE=cuda`` the
process group is built by the GPU backend selection (``cpu:gloo,cuda:<gloo for nccl>`` on a CPU build).
``OBJECTIVE`` ``decoupled`` trains with the bundled configs' objective (``proximal: recompute_stale``,
``is_correction: tis``) on a batch whose signal rows split unequally over two ranks (2 and 1), so one rank
pads with a dummy micro-batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from agentrl.trainer.distributed import DistInfo


def main(model_dir: str, out_path: str, objective: str = "plain") -> None:
    """Join the group, update once, leave the group after the sharded model is gone (as ``train`` does)."""
    from agentrl.trainer.distributed import close_distributed, init_distributed

    _update_and_dump(model_dir, out_path, init_distributed(), objective)
    close_distributed()


def _update_and_dump(model_dir: str, out_path: str, dist: DistInfo, objective: str) -> None:
    """Build, optionally shard, update once, dump results."""
    from transformers import AutoModelForCausalLM

    from agentrl.algos.config import AlgorithmConfig
    from agentrl.config.sections import TrainerConfig
    from agentrl.trainer.batch import build_rows, pack_micro_batches, split_mini_batches
    from agentrl.trainer.distributed import decoder_layers_of, full_state_dict, shard_policy
    from agentrl.trainer.logprobs import PolicyLogprobs
    from agentrl.trainer.update import PolicyUpdater

    sys.path.insert(0, str(Path(__file__).parent))
    from trainer_episodes import make_groups

    torch.manual_seed(0)
    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if objective == "decoupled":
        # signal rows 0, 2, 3 (row 1's reward is the group mean; group 2 is all-equal): 2 on rank 0, 1 on rank 1
        rewards = [[0.0, 0.5, 0.75, 0.75], [0.5, 0.5, 0.5, 0.5]]
    else:
        rewards = [[1.0, 0.0, 0.5, 0.2], [0.3, 0.9, 0.1, 0.4], [0.0, 1.0, 1.0, 0.0], [0.7, 0.2, 0.2, 0.6]]
    groups = make_groups(lm, rewards, turns=8 if objective == "decoupled" else 2)  # 8 turns: > 32 tokens a row
    for ep in (e for g in groups for e in g):  # engine logprobs slightly off, so the ratio and clipping are exercised
        seg = ep.segments[0]
        seg.logprobs = [
            lp - 0.002 * (i % 3) if m else 0.0 for i, (lp, m) in enumerate(zip(seg.logprobs, seg.loss_mask))
        ]
    policy = PolicyLogprobs(lm, chunk_tokens=16)
    if dist.enabled:
        shard_policy(policy, decoder_layers_of(lm))
    loss = {"kind": "gspo_token", "eps_low": 0.2, "eps_high": 0.28}
    if objective == "decoupled":  # as configs/quickstart.yaml; the smallest token budget: about a row per micro-batch
        algo = AlgorithmConfig(loss=loss, proximal="recompute_stale", is_correction={"kind": "tis", "cap": 2.0})
        trainer = TrainerConfig(lr=1e-3, mini_batches=1, micro_batch_tokens=64)
    else:
        algo = AlgorithmConfig(loss=loss)
        trainer = TrainerConfig(lr=1e-3, mini_batches=2, micro_batch_tokens=96)
    updater = PolicyUpdater(policy, algo, trainer, temperature=1.0, total_steps=1, dist=dist)
    # decoupled: the trainer holds version 1, the episodes (version 0) are one step stale and recomputed
    version = 1 if objective == "decoupled" else None
    rows = build_rows(groups, 4, algo, current_version=version or 0)
    mini = split_mini_batches(rows, 1)[0]  # (the decoupled case's one mini-batch) split over ranks as the updater does
    shares = [len(pack_micro_batches([r for r in mini[k::2] if r.trainable], 64)) for k in range(2)]
    metrics = updater.update(rows, version=version)
    state = full_state_dict(lm)
    if dist.is_main:
        params = {k: v.double().sum().item() for k, v in state.items()}
        backend = None
        if dist.enabled:
            import torch.distributed as tdist

            backend = str(tdist.get_backend())
        report = {"metrics": metrics, "params": params, "world": dist.world_size, "backend": backend}
        report["micro_batches_per_rank"] = shares  # of two ranks' shares (with one mini-batch)
        Path(out_path).write_text(json.dumps(report))
        torch.save(state, out_path + ".pt")


if __name__ == "__main__":
    main(*sys.argv[1:4])
