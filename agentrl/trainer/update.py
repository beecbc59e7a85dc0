"""One policy update per rollout batch: mini-batches -> packed micro-batches -> loss -> AdamW steps.

Invariants: every micro-batch loss is divided by the mini-batch's N (all its rows, zero-advantage
and empty ones included, over all ranks), so gradient accumulation reproduces the full mini-batch
gradient; rows whose advantages are all zero are skipped (they give exactly zero gradient).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict
from collections.abc import Callable

import torch
from torch.optim.lr_scheduler import LambdaLR

from agentrl.algos import policy_loss
from agentrl.config.sections import AlgorithmConfig, TrainerConfig
from agentrl.trainer.batch import MicroBatch, TrainRow, collate, pack_micro_batches, split_mini_batches
from agentrl.trainer.distributed import DistInfo, max_over_ranks, sum_over_ranks
from agentrl.trainer.logprobs import PolicyLogprobs

_COUNT_KEYS = ("n_tokens", "n_seqs", "n_clipped_tokens", "n_clipped_seqs", "sum_abs_log_s", "entropy_sum", "loss")


def lr_lambda(cfg: TrainerConfig, total_updates: int) -> Callable[[int], float]:
    """Linear warm-up over ``warmup_steps`` optimizer steps, then constant, cosine or linear decay to 0."""

    def factor(update: int) -> float:
        if update < cfg.warmup_steps:
            return (update + 1) / cfg.warmup_steps
        if cfg.lr_schedule == "constant":
            return 1.0
        progress = min(1.0, (update - cfg.warmup_steps) / max(1, total_updates - cfg.warmup_steps))
        return 0.5 * (1 + math.cos(math.pi * progress)) if cfg.lr_schedule == "cosine" else 1.0 - progress

    return factor


def _dummy_micro_batch() -> MicroBatch:
    """A one-token row with advantage 0: keeps FSDP collectives paired on ranks with less work."""
    return collate([TrainRow([0, 0], [0.0], [True], [0], [0.0], -1)])


class PolicyUpdater:
    """Owns the optimizer and LR schedule; turns trainer rows into optimizer steps."""

    def __init__(
        self,
        policy: PolicyLogprobs,
        algo: AlgorithmConfig,
        cfg: TrainerConfig,
        *,
        temperature: float,
        total_steps: int,
        dist: DistInfo = DistInfo(),
    ) -> None:
        self.policy, self.algo, self.cfg, self.temperature, self.dist = policy, algo, cfg, temperature, dist
        self.device = next(policy.parameters()).device
        self.optimizer = torch.optim.AdamW(
            policy.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )
        self.scheduler = LambdaLR(self.optimizer, lr_lambda(cfg, total_steps * cfg.mini_batches))

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _local_rows(self, rows: list[TrainRow]) -> list[TrainRow]:
        return rows[self.dist.rank :: self.dist.world_size] if self.dist.enabled else rows

    def _micro_batches(self, rows: list[TrainRow]) -> list[MicroBatch]:
        local = pack_micro_batches(rows, self.cfg.micro_batch_tokens) if rows else []
        total = max_over_ranks(len(local), self.dist)
        return local + [_dummy_micro_batch() for _ in range(total - len(local))]

    def update(self, rows: list[TrainRow]) -> dict[str, float]:
        """Run ``trainer.mini_batches`` optimizer steps over the rows; returns train metrics."""
        start = time.perf_counter()
        metrics: dict[str, float] = {}
        if self.algo.old_logprobs == "recompute":
            metrics.update(self.recompute_old_logprobs(rows))
        totals: dict[str, float] = defaultdict(float)
        grad_norms: list[float] = []
        for index, mini in enumerate(split_mini_batches(rows, self.cfg.mini_batches)):
            stats, norm = self._mini_batch_step(mini, first=index == 0)
            for key, value in stats.items():
                totals[key] = max(totals[key], value) if key.endswith("_max") else totals[key] + value
            if norm is not None:
                grad_norms.append(norm)
        metrics.update(self._summarize(totals, grad_norms, len(rows), time.perf_counter() - start))
        metrics["train/stale_masked_tokens"] = float(sum(r.stale_tokens for r in rows))  # algorithm.max_token_lag
        return metrics

    def _mini_batch_step(self, mini: list[TrainRow], first: bool) -> tuple[dict[str, float], float | None]:
        n_local = len(mini) / self.dist.world_size  # N / W per rank: the DP average then divides by W
        trainable = [r for r in self._local_rows(mini) if r.trainable]
        skipped = len(self._local_rows(mini)) - len(trainable)
        stats: dict[str, float] = defaultdict(float)
        stats["skipped_rows"] = float(skipped)
        if max_over_ranks(len(trainable), self.dist) == 0:
            return dict(stats), None  # no signal anywhere: no forward, no optimizer step (Adam momentum would move)
        self.optimizer.zero_grad(set_to_none=True)
        abs_log_s: list[torch.Tensor] = []
        for micro in self._micro_batches(trainable):
            loss, logp_bt = self._micro_loss(micro.to(self.device), n_local, stats)
            loss.backward()
            if first:
                abs_log_s.append(_abs_log_s(logp_bt, micro))
        norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg.max_grad_norm)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        self.optimizer.step()
        self.scheduler.step()
        if first and abs_log_s:
            stats.update(_quantiles("mb0_abs_log_s", torch.cat(abs_log_s)))
        return dict(stats), float(norm)

    def _micro_loss(
        self, micro: MicroBatch, n_local: float, stats: dict[str, float]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with self._autocast():
            out = self.policy(micro.input_ids, micro.mask, self.temperature)
        loss_out = policy_loss(
            self.algo.loss,
            out.logp_bt,
            micro.logp_old,
            micro.mask,
            micro.adv,
            eps_low=self.algo.eps_low,
            eps_high=self.algo.eps_high,
            num_sequences=n_local,
            log_ratio_clamp=self.algo.log_ratio_clamp,
        )
        real = [r for r in micro.rows if r.episode_index >= 0]
        if real:
            for key in _COUNT_KEYS[:5]:
                stats[key] += loss_out.metrics[key]
            stats["entropy_sum"] += float(out.entropy_n.sum())
            stats["abs_log_s_max"] = max(stats["abs_log_s_max"], loss_out.metrics["abs_log_s_max"])
        stats["loss"] += loss_out.metrics["loss"]
        return loss_out.loss, out.logp_bt.detach()

    def _summarize(
        self, totals: dict[str, float], grad_norms: list[float], num_rows: int, wall_s: float
    ) -> dict[str, float]:
        keys = list(_COUNT_KEYS) + ["skipped_rows"]
        summed = dict(zip(keys, sum_over_ranks([totals.get(k, 0.0) for k in keys], self.dist)))
        n_tok = max(summed["n_tokens"], 1.0)
        n_seq = max(summed["n_seqs"], 1.0)
        out = {
            "train/loss": summed["loss"] / self.dist.world_size / self.cfg.mini_batches,
            "train/clip_frac_token": summed["n_clipped_tokens"] / n_tok,
            "train/clip_frac_seq": summed["n_clipped_seqs"] / n_seq,
            "train/abs_log_s_mean": summed["sum_abs_log_s"] / n_seq,
            "train/abs_log_s_max": totals.get("abs_log_s_max", 0.0),
            "train/entropy": summed["entropy_sum"] / n_tok,
            "train/grad_norm": sum(grad_norms) / len(grad_norms) if grad_norms else 0.0,
            "train/lr": self.scheduler.get_last_lr()[0],
            "train/optimizer_steps": float(len(grad_norms)),
            "train/skipped_zero_adv_rows": summed["skipped_rows"],
            "train/rows": float(num_rows),
            "train/trained_tokens": summed["n_tokens"],
            "train/tokens_per_s": summed["n_tokens"] / max(wall_s, 1e-9),
            "train/time_s": wall_s,
        }
        out.update({f"train/{k}": v for k, v in totals.items() if k.startswith("mb0_")})
        return out

    @torch.no_grad()
    def recompute_old_logprobs(self, rows: list[TrainRow]) -> dict[str, float]:
        """Replace the engine logprobs by a trainer forward (pi_old := current policy); log the mismatch."""
        by_turn: dict[int, list[torch.Tensor]] = defaultdict(list)
        abs_log_s: list[torch.Tensor] = []
        clipped = seqs = 0.0
        local = self._local_rows(rows)
        for micro in self._micro_batches(local):
            dev = micro.to(self.device)
            with self._autocast():
                logp = self.policy(dev.input_ids, dev.mask, self.temperature).logp_bt.cpu()
            if not any(r.episode_index >= 0 for r in micro.rows):
                continue
            probe = policy_loss(
                self.algo.loss,
                logp,
                micro.logp_old,
                micro.mask,
                micro.adv,
                eps_low=self.algo.eps_low,
                eps_high=self.algo.eps_high,
            )
            clipped, seqs = clipped + probe.metrics["n_clipped_seqs"], seqs + probe.metrics["n_seqs"]
            abs_log_s.append(_abs_log_s(logp, micro))
            for k in micro.turn_ids[micro.mask].unique().tolist():
                sel = micro.mask & (micro.turn_ids == k)
                by_turn[k].append(logp[sel] - micro.logp_old[sel])
            _write_back(micro, logp)
        return _mismatch_metrics(by_turn, abs_log_s, clipped, seqs)


def _write_back(micro: MicroBatch, logp: torch.Tensor) -> None:
    for i, row in enumerate(micro.rows):
        width = row.length - 1
        row.logp_old = torch.where(micro.mask[i, :width], logp[i, :width], 0.0).tolist()


def _abs_log_s(logp_bt: torch.Tensor, micro: MicroBatch) -> torch.Tensor:
    """|log s_i| of the non-empty real rows of a micro-batch (GSPO.md 2.6: the mismatch seen at mini-batch 0)."""
    logp_bt = logp_bt.cpu()
    mask = micro.mask.cpu()
    diff = torch.where(mask, logp_bt - micro.logp_old.cpu(), 0.0).sum(-1) / mask.sum(-1).clamp(min=1)
    real = torch.tensor([r.episode_index >= 0 for r in micro.rows]) & mask.any(-1)
    return diff[real].abs()


def _quantiles(prefix: str, values: torch.Tensor) -> dict[str, float]:
    if values.numel() == 0:
        return {}
    q = torch.quantile(values.double(), torch.tensor([0.5, 0.9], dtype=torch.float64)).tolist()
    return {f"{prefix}_p50": q[0], f"{prefix}_p90": q[1], f"{prefix}_max": float(values.max())}


def _mismatch_metrics(
    by_turn: dict[int, list[torch.Tensor]], abs_log_s: list[torch.Tensor], clipped: float, seqs: float
) -> dict[str, float]:
    """Per-turn mean/max |delta logprob| and the k3 KL estimate E[exp(d) - 1 - d], d = logp_train - logp_engine."""
    out: dict[str, float] = {}
    all_d = []
    for k in sorted(by_turn):
        d = torch.cat(by_turn[k]).double()
        all_d.append(d)
        out[f"mismatch/turn{k}/abs_mean"] = float(d.abs().mean())
        out[f"mismatch/turn{k}/abs_max"] = float(d.abs().max())
        out[f"mismatch/turn{k}/kl_k3"] = float((d.exp() - 1 - d).mean())
    if all_d:
        d = torch.cat(all_d)
        out.update(
            {
                "mismatch/abs_mean": float(d.abs().mean()),
                "mismatch/abs_max": float(d.abs().max()),
                "mismatch/kl_k3": float((d.exp() - 1 - d).mean()),
            }
        )
    if abs_log_s:
        out.update(_quantiles("mismatch/pre_update_abs_log_s", torch.cat(abs_log_s)))
    out["mismatch/pre_update_clip_frac_seq"] = clipped / max(seqs, 1.0)
    return out
