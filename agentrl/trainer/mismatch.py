"""The engine-trainer mismatch of a batch: the trainer's logprobs of the sampled tokens against the engine's.

Measured before any update (docs/algorithm.md#the-old-policy-is-the-engine), per turn and overall:
mean/max |logp_train - logp_engine| over tokens, the k3 KL estimate, |log s_i| quantiles, and the fractions of
sequences and tokens the configured loss would already clip. ``old_logprobs: recompute`` logs it as
``mismatch/*`` and then trains on the trainer's logprobs; the audit (``algorithm.audit_every``) logs it as
``audit/*`` and leaves the update untouched.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from agentrl.algos import LossBatch, PolicyLoss
from agentrl.trainer.batch import MicroBatch


def quantiles(prefix: str, values: torch.Tensor) -> dict[str, float]:
    """p50, p90 and max of ``values`` as ``<prefix>_p50`` ... (empty when there are none)."""
    if values.numel() == 0:
        return {}
    q = torch.quantile(values.double(), torch.tensor([0.5, 0.9], dtype=torch.float64)).tolist()
    return {f"{prefix}_p50": q[0], f"{prefix}_p90": q[1], f"{prefix}_max": float(values.max())}


def abs_log_s(logp_bt: torch.Tensor, micro: MicroBatch, mask: torch.Tensor | None = None) -> torch.Tensor:
    """|log s_i| of the non-empty real rows of a micro-batch (loss layout; ``mask``: a narrower token mask)."""
    logp_bt = logp_bt.cpu()
    mask = (micro.mask if mask is None else mask).cpu()
    diff = torch.where(mask, logp_bt - micro.logp_old.cpu(), 0.0).sum(-1) / mask.sum(-1).clamp(min=1)
    real = torch.tensor([r.episode_index >= 0 for r in micro.rows]) & mask.any(-1)
    return diff[real].abs()


class MismatchMeter:
    """Accumulates the mismatch over the micro-batches of a batch; ``metrics`` reports it under a prefix."""

    def __init__(self, loss: PolicyLoss) -> None:
        self.loss = loss
        self.by_turn: dict[int, list[torch.Tensor]] = defaultdict(list)
        self.abs_log_s: list[torch.Tensor] = []
        self.clipped = {"n_clipped_seqs": 0.0, "n_seqs": 0.0, "n_clipped_tokens": 0.0, "n_tokens": 0.0}

    def add(self, micro: MicroBatch, logp_bt: torch.Tensor, rows: list[bool] | None = None) -> None:
        """Add one micro-batch's trainer logprobs (loss layout, on the micro-batch's device); ``rows``: only the
        rows flagged (the population a fused forward shares with rows that were not recomputed)."""
        if not any(r.episode_index >= 0 for r in micro.rows):
            return
        mask = micro.mask
        if rows is not None:
            mask = mask & torch.tensor(rows, device=mask.device)[:, None]
        inputs = {name: getattr(micro, name) for name in self.loss.inputs}
        probe = self.loss(LossBatch(logp_bt, micro.logp_old, mask, micro.adv, **inputs))
        for key in self.clipped:
            self.clipped[key] += probe.metrics.get(key, 0.0)
        self.abs_log_s.append(abs_log_s(logp_bt, micro, mask))
        for k in micro.turn_ids[mask].unique().tolist():
            sel = mask & (micro.turn_ids == k)
            self.by_turn[k].append((logp_bt[sel] - micro.logp_old[sel]).cpu())

    def metrics(self, prefix: str) -> dict[str, float]:
        """Per-turn and overall mean/max |delta logprob| and k3 KL E[exp(d) - 1 - d], d = train - engine."""
        out: dict[str, float] = {}
        all_d = []
        for k in sorted(self.by_turn):
            d = torch.cat(self.by_turn[k]).double()
            all_d.append(d)
            out.update(_delta_stats(f"{prefix}/turn{k}", d))
        if all_d:
            out.update(_delta_stats(prefix, torch.cat(all_d)))
        if self.abs_log_s:
            out.update(quantiles(f"{prefix}/pre_update_abs_log_s", torch.cat(self.abs_log_s)))
        c = self.clipped
        out[f"{prefix}/pre_update_clip_frac_seq"] = c["n_clipped_seqs"] / max(c["n_seqs"], 1.0)
        out[f"{prefix}/pre_update_clip_frac_token"] = c["n_clipped_tokens"] / max(c["n_tokens"], 1.0)
        return out


def _delta_stats(prefix: str, d: torch.Tensor) -> dict[str, float]:
    return {
        f"{prefix}/abs_mean": float(d.abs().mean()),
        f"{prefix}/abs_max": float(d.abs().max()),
        f"{prefix}/kl_k3": float((d.exp() - 1 - d).mean()),
    }


def write_back(micro: MicroBatch, logp_bt: torch.Tensor, *, keep_behaviour: bool = False) -> None:
    """pi_old := the trainer's logprobs (old_logprobs: recompute), row by row (loss layout).

    ``keep_behaviour``: first keep the engine's logprobs as ``logp_behaviour`` (the decoupled objective's b).
    """
    for i, row in enumerate(micro.rows):
        width = len(row.logp_old)
        if keep_behaviour and not row.logp_behaviour:
            row.logp_behaviour = list(row.logp_old)
        row.logp_old = torch.where(micro.mask[i, :width], logp_bt[i, :width], 0.0).tolist()
