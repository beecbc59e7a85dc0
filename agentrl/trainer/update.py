"""One policy update per rollout batch: mini-batches -> packed micro-batches -> loss -> AdamW steps.

Invariants: every micro-batch loss is divided by the mini-batch's N (all its rows, zero-advantage
and empty ones included, over all ranks), so gradient accumulation reproduces the full mini-batch
gradient; rows whose advantages are all zero are skipped (they give exactly zero gradient). The
loss is the configured plug-in; its statistics are aggregated as it declares (sum, max or ratio).
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import torch
from torch.optim.lr_scheduler import LambdaLR

from agentrl.algos import LossBatch, PolicyLoss
from agentrl.algos.config import AlgorithmConfig
from agentrl.algos.loss_base import finish_metrics
from agentrl.config.sections import TrainerConfig
from agentrl.errors import ConfigError
from agentrl.models.precision import has_fast_bf16
from agentrl.trainer.batch import MicroBatch, TrainRow, collate, pack_micro_batches, split_mini_batches
from agentrl.trainer.distributed import DistInfo, max_floats_over_ranks, max_over_ranks, sum_over_ranks
from agentrl.trainer.layer_checkpointing import LayerCheckpointing
from agentrl.trainer.logprobs import PolicyLogprobs, TokenLogprobs
from agentrl.trainer.mismatch import MismatchMeter, abs_log_s, quantiles, write_back
from agentrl.trainer.shared_prefix import pack_shared_prefix

# the updater's own sums; the loss declares its own
_OWN_SUMS = ("loss", "entropy_sum", "trained_tokens", "skipped_rows", "micro_batches", "recomputed_layers")


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


def lag_metrics(rows: list[TrainRow], version: int | None) -> dict[str, float]:
    """Mean and max version lag of the tokens this update trains (those with a known version)."""
    if version is None:
        return {}
    lags = [version - v for r in rows for m, v in zip(r.mask, r.versions) if m and v >= 0]
    if not lags:
        return {"train/token_lag_mean": 0.0, "train/token_lag_max": 0.0}
    return {"train/token_lag_mean": sum(lags) / len(lags), "train/token_lag_max": float(max(lags))}


def autocast_bf16(precision: str, device_type: str) -> bool:
    """Whether the trainer's forward runs under bf16 autocast: ``trainer.precision`` on ``device_type``."""
    if precision == "bfloat16_autocast_if_fast":
        return has_fast_bf16(device_type)
    return precision == "bfloat16_autocast" or (precision == "auto" and device_type == "cuda")


def _dummy_micro_batch() -> MicroBatch:
    """A one-token row with advantage 0: keeps FSDP collectives paired on ranks with less work.

    It carries every input a loss may read, the behaviour logprobs of the decoupled objective included
    (docs/algorithm.md#the-decoupled-objective): a loss that refused it on one rank would leave the others
    waiting in their collectives.
    With advantage 0 it contributes exactly 0 to the loss and the gradient.
    """
    return collate([TrainRow([[0, 0]], [0.0], [True], [0], [0.0], -1, versions=[-1], logp_behaviour=[0.0])])


@dataclass
class _Totals:
    """Statistics of one update, summed (or maxed) over micro-batches and mini-batches of this rank."""

    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    maxima: dict[str, float] = field(default_factory=dict)
    first: dict[str, float] = field(default_factory=dict)  # mini-batch 0 diagnostics


class PolicyUpdater:
    """Owns the optimizer and LR schedule; turns trainer rows into optimizer steps with the configured loss."""

    def __init__(
        self,
        policy: PolicyLogprobs,
        algo: AlgorithmConfig,
        cfg: TrainerConfig,
        *,
        temperature: float,
        total_steps: int,
        dist: DistInfo = DistInfo(),
        engine_matches_fp32: bool = True,
    ) -> None:
        """``engine_matches_fp32``: the engine's logprobs are an fp32 forward's (``EngineConfig.
        samples_like_an_fp32_trainer``); with this trainer's autocast off too, ``proximal: recompute_stale`` may
        take a fresh row's engine logprobs as its proximal. Otherwise every trained row is recomputed."""
        self.policy, self.algo, self.cfg, self.temperature, self.dist = policy, algo, cfg, temperature, dist
        self.loss: PolicyLoss = algo.loss  # type: ignore[assignment]  # resolved by the config's registry
        self.off_policy = algo.off_policy
        self.metric_spec = self.loss.metric_spec(self.off_policy)
        self._mismatch: MismatchMeter | None = None  # the update's engine-trainer mismatch, when it recomputes
        self.version: int | None = None  # the policy version at the start of the current update
        # called before each micro-batch's forward (async mode widens the update's threads there)
        self.before_micro_batch: Callable[[], None] | None = None
        unsupplied = sorted(self.loss.inputs - {f.name for f in fields(MicroBatch)})
        if unsupplied:
            raise ConfigError(
                f"loss {self.loss.kind!r} needs inputs {unsupplied} that the synchronous trainer does not provide; "
                "choose another algorithm.loss"
            )
        self.device = next(policy.parameters()).device
        self.layer_checkpointing = (
            LayerCheckpointing(policy.lm, cfg.keep_activations_tokens)
            if cfg.gradient_checkpointing and cfg.keep_activations_tokens
            else None
        )
        # the engine's logprobs are this trainer's own (float rounding aside): recompute_stale may keep fresh rows'
        self.engine_logprobs_exact = engine_matches_fp32 and not autocast_bf16(cfg.precision, self.device.type)
        self.optimizer = torch.optim.AdamW(
            policy.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )
        self.scheduler = LambdaLR(self.optimizer, lr_lambda(cfg, total_steps * cfg.mini_batches))

    def _autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast of the forward (and so the backward) when ``trainer.precision`` asks for it."""
        if autocast_bf16(self.cfg.precision, self.device.type):
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _local_rows(self, rows: list[TrainRow]) -> list[TrainRow]:
        return rows[self.dist.rank :: self.dist.world_size] if self.dist.enabled else rows

    def _micro_batches(self, rows: list[TrainRow]) -> list[MicroBatch]:
        if not rows:
            local = []
        elif self.cfg.pack_shared_prompts:
            local = pack_shared_prefix(rows, self.cfg.micro_batch_tokens, self.cfg.pack_shared_prompts_max_len)
        else:
            local = pack_micro_batches(rows, self.cfg.micro_batch_tokens)
        total = max_over_ranks(len(local), self.dist)
        return local + [_dummy_micro_batch() for _ in range(total - len(local))]

    def _lags(self, micro: MicroBatch) -> torch.Tensor:
        """Version lag of each token (0 where its version or the trainer's is unknown)."""
        if self.version is None:
            return torch.zeros_like(micro.versions)
        return torch.where(micro.versions >= 0, (self.version - micro.versions).clamp(min=0), 0)

    def _loss_batch(self, logp_bt: torch.Tensor, micro: MicroBatch) -> LossBatch:
        extra = {name: getattr(micro, name) for name in self.loss.inputs}
        if self.off_policy.decoupled:
            extra.update(logp_behaviour=micro.logp_behaviour, lags=self._lags(micro))
        return LossBatch(logp_bt, micro.logp_old, micro.mask, micro.adv, **extra)

    def update(self, rows: list[TrainRow], *, audit: bool = False, version: int | None = None) -> dict[str, float]:
        """Run ``trainer.mini_batches`` optimizer steps over the rows; returns train metrics.

        ``audit``: first measure the engine-trainer mismatch of the batch (``audit/*``) without using it.
        ``version``: the policy version of the weights at the start (token lags = version - token version).
        """
        start = time.perf_counter()
        self.version = version
        metrics: dict[str, float] = lag_metrics(rows, version)
        self._mismatch = None
        if self.off_policy.recomputes:
            metrics.update(self.recompute_old_logprobs(rows))
        elif audit:
            metrics.update(self.audit_engine_logprobs(rows))
        totals = _Totals()
        grad_norms: list[float] = []
        lr = self.scheduler.get_last_lr()[0]  # the update's first step uses it; after the loop the schedule moved on
        for index, mini in enumerate(split_mini_batches(rows, self.cfg.mini_batches)):
            norm = self._mini_batch_step(mini, totals, first=index == 0)
            if norm is not None:
                grad_norms.append(norm)
        if self._mismatch is not None:  # complete only now: mini-batch 0's forward measured its fused rows
            metrics.update(self._mismatch.metrics("mismatch"))
        metrics.update(self._summarize(totals, grad_norms, len(rows), time.perf_counter() - start))
        metrics["train/lr"] = lr
        metrics["train/stale_masked_tokens"] = float(sum(r.stale_tokens for r in rows))  # algorithm.max_token_lag
        return metrics

    def _mini_batch_step(self, mini: list[TrainRow], totals: _Totals, first: bool) -> float | None:
        n_local = len(mini) / self.dist.world_size  # N / W per rank: the DP average then divides by W
        trainable = [r for r in self._local_rows(mini) if r.trainable]
        totals.sums["skipped_rows"] += float(len(self._local_rows(mini)) - len(trainable))
        if max_over_ranks(len(trainable), self.dist) == 0:
            # No signal anywhere: no forward, no optimizer step (Adam momentum would move). The schedule still
            # advances: it counts mini-batches (steps x mini_batches), so a decaying LR reaches its end on time.
            with warnings.catch_warnings():  # before any optimizer step torch warns of a skipped value: intended here
                warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step\\(\\)` before", UserWarning)
                self.scheduler.step()
            return None
        self.optimizer.zero_grad(set_to_none=True)
        first_abs_log_s: list[torch.Tensor] = []
        for micro in self._micro_batches(trainable):
            if self.before_micro_batch is not None:
                self.before_micro_batch()
            on_device = micro.to(self.device)
            loss, logp_bt = self._micro_loss(on_device, n_local, totals)
            loss.backward()
            if first:
                first_abs_log_s.append(abs_log_s(logp_bt, on_device))
        norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg.max_grad_norm)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        self.optimizer.step()
        # Gradients are dead once applied: free them now, not at the next zero_grad, so the rollout, the weight
        # sync and the checkpoint between two updates do not hold a model-sized buffer.
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        if first and first_abs_log_s:
            totals.first.update(quantiles("mb0_abs_log_s", torch.cat(first_abs_log_s)))
        return float(norm)

    def _forward(self, micro: MicroBatch) -> TokenLogprobs:
        return self.policy(
            micro.input_ids,
            micro.select,
            self.temperature,
            position_ids=micro.position_ids,
            attention=micro.attention,
            blocks=micro.blocks if self.cfg.packed_attention == "blocks" else None,
        )

    def _micro_loss(self, micro: MicroBatch, n_local: float, totals: _Totals) -> tuple[torch.Tensor, torch.Tensor]:
        totals.sums["micro_batches"] += 1.0
        if self.layer_checkpointing is not None:
            totals.sums["recomputed_layers"] += self.layer_checkpointing.before_forward(micro.input_ids.numel())
        with self._autocast():
            out = self._forward(micro)
        logp_bt = micro.loss_layout(out.logp_bt)
        self._proximal_from_forward(micro, logp_bt)
        loss_out = self.loss(self._loss_batch(logp_bt, micro), n_local, self.off_policy)
        if any(r.episode_index >= 0 for r in micro.rows):  # statistics of real rows only, not padding rows
            for name, metric in self.metric_spec.items():
                if metric.kind == "sum":
                    totals.sums[name] += loss_out.metrics.get(name, 0.0)
                elif metric.kind == "max" and name in loss_out.metrics:
                    totals.maxima[name] = max(totals.maxima.get(name, -math.inf), loss_out.metrics[name])
            totals.sums["entropy_sum"] += float(out.entropy_n.sum())
            totals.sums["trained_tokens"] += float(micro.mask.sum())
        totals.sums["loss"] += loss_out.metrics["loss"]
        return loss_out.loss, logp_bt.detach()

    def _summarize(self, totals: _Totals, grad_norms: list[float], num_rows: int, wall_s: float) -> dict[str, float]:
        spec = self.metric_spec
        sum_keys = [*_OWN_SUMS, *(k for k, m in spec.items() if m.kind == "sum")]
        max_keys = [k for k, m in spec.items() if m.kind == "max"]
        sums = dict(zip(sum_keys, sum_over_ranks([totals.sums.get(k, 0.0) for k in sum_keys], self.dist)))
        local_max = [totals.maxima.get(k, -math.inf) for k in max_keys]
        maxima = {k: v for k, v in zip(max_keys, max_floats_over_ranks(local_max, self.dist)) if v > -math.inf}
        tokens = sums["trained_tokens"]
        out = {f"train/{name}": value for name, value in finish_metrics(spec, sums, maxima).items()}
        out.update(
            {
                "train/loss": sums["loss"] / self.dist.world_size / self.cfg.mini_batches,
                "train/entropy": sums["entropy_sum"] / max(tokens, 1.0),
                "train/grad_norm": sum(grad_norms) / len(grad_norms) if grad_norms else 0.0,
                "train/optimizer_steps": float(len(grad_norms)),
                "train/skipped_zero_adv_rows": sums["skipped_rows"],
                "train/rows": float(num_rows),
                "train/trained_tokens": tokens,
                "train/tokens_per_s": tokens / max(wall_s, 1e-9),
                "train/time_s": wall_s,
            }
        )
        out.update({f"train/{k}": v for k, v in totals.first.items()})
        if self.layer_checkpointing is not None:  # layers that recomputed, per micro-batch (keep_activations_tokens)
            out["train/recomputed_layers"] = sums["recomputed_layers"] / max(sums["micro_batches"], 1.0)
        return out

    def _proximal_from_forward(self, micro: MicroBatch, logp_bt: torch.Tensor) -> None:
        """Rows flagged ``proximal_from_forward`` take this forward's detached logprobs as their proximal: it runs at
        the step-start weights, in the trainer's precision, so it computes what the recompute pass would have. The
        engine's logprobs in ``micro.logp_old`` are measured against it first (``mismatch/*``)."""
        fused = [row.proximal_from_forward for row in micro.rows]
        if not any(fused):
            return
        detached = logp_bt.detach()
        if self._mismatch is not None:  # the rows recomputed, as in later mini-batches' pass: not their neighbours
            self._mismatch.add(micro, detached, rows=fused)
        take = torch.tensor(fused, device=detached.device)[:, None] & micro.mask
        micro.logp_old = torch.where(take, detached, micro.logp_old)
        for row in micro.rows:
            row.proximal_from_forward = False  # used once: later mini-batches train on moved weights

    @torch.no_grad()
    def _trainer_logprobs(self, rows: list[TrainRow]) -> list[tuple[MicroBatch, torch.Tensor]]:
        """The trainer's logprobs (loss layout, CPU) of rows this rank holds, micro-batch by micro-batch."""
        out = []
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            for micro in self._micro_batches(rows):
                dev = micro.to(self.device)
                with self._autocast():
                    logp = self._forward(dev).logp_bt
                out.append((micro, micro.loss_layout(logp.cpu())))
        return out

    def recompute_old_logprobs(self, rows: list[TrainRow]) -> dict[str, float]:
        """Replace the engine logprobs by the trainer's at the step-start weights (pi_old := current policy); the
        mismatch is logged after the update (``mismatch/*``).

        Only rows the loss will see get them (a row with no non-zero advantage gives no gradient), and with
        ``proximal: recompute_stale`` only those holding a token sampled before this step's weights: a fresh
        row's proximal is its behaviour (the engine's logprobs), kept as both. Rows of mini-batch 0 take them
        from their own training forward (``proximal_from_forward``); only later mini-batches' rows, trained after
        an optimizer step, need a no-grad forward first (``train/proximal_forward_rows``).
        """
        here = self._trained_here(rows)
        chosen = [r for r in here if r.trainable and self._needs_recompute(r)]
        first = {id(r) for r in self._local_rows(split_mini_batches(rows, self.cfg.mini_batches)[0])}
        forwarded = [r for r in chosen if id(r) not in first]
        if self.off_policy.decoupled:
            chosen_ids = {id(r) for r in chosen}
            for row in here:
                if not row.logp_behaviour and (id(row) not in chosen_ids or id(row) in first):
                    row.logp_behaviour = list(row.logp_old)  # p = b for this row, or b kept before p replaces it
        for row in chosen:
            row.proximal_from_forward = id(row) in first
        self._mismatch = MismatchMeter(self.loss)
        for micro, logp in self._trainer_logprobs(forwarded):
            self._mismatch.add(micro, logp)
            if any(r.episode_index >= 0 for r in micro.rows):
                write_back(micro, logp, keep_behaviour=self.off_policy.decoupled)
        recomputed, passes = sum_over_ranks([float(len(chosen)), float(len(forwarded))], self.dist)
        return {"train/recomputed_rows": recomputed, "train/proximal_forward_rows": passes}

    def _needs_recompute(self, row: TrainRow) -> bool:
        """recompute_stale: does a trained token of ``row`` come from older weights (or from unknown ones), or from
        an engine whose numerics are not this trainer's (bf16 on either side: its ratio would start off 1 by the
        mismatch, outside GSPO's band)?"""
        if self.off_policy.proximal != "recompute_stale" or self.version is None or not row.versions:
            return True
        if not self.engine_logprobs_exact:
            return True
        return any(m and v < self.version for m, v in zip(row.mask, row.versions))  # -1: unknown, recomputed

    def _trained_here(self, rows: list[TrainRow]) -> list[TrainRow]:
        """The rows this rank's mini-batch steps will train (its share of each mini-batch), in order."""
        return [r for mini in split_mini_batches(rows, self.cfg.mini_batches) for r in self._local_rows(mini)]

    def audit_engine_logprobs(self, rows: list[TrainRow]) -> dict[str, float]:
        """Measure the engine-trainer mismatch of the batch before the update, changing nothing (audit/*)."""
        meter = MismatchMeter(self.loss)
        for micro, logp in self._trainer_logprobs(self._trained_here(rows)):
            meter.add(micro, logp)
        return meter.metrics("audit")
