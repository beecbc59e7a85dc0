"""The policy-loss plug-in point: ``PolicyLoss`` (settings + surrogate), its inputs, its metrics, its registry.

Invariants (docs/algorithm.md#the-sequence-ratio, #the-divisor-n): ratio arithmetic is fp32 on masked
log-differences selected with
``where`` (never products of probabilities, never mask multiplication); the loss is
``-(1/N) * sum_i per_row_i`` with N the rows of the optimizer mini-batch (empty rows included),
so micro-batch splits sum to the same loss. A loss declares how each of its statistics
aggregates over micro-batches and ranks, so the trainer never needs its metric names.
"""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import torch

from agentrl.algos.offpolicy import Level, OffPolicy, behaviour_weights, proximal_logprobs
from agentrl.config.plugins import PluginRegistry, PluginSettings
from agentrl.config.problems import Problem
from agentrl.errors import ConfigError


@dataclass
class PolicyLossOutput:
    """The scalar loss to minimise and float metrics (fractions plus raw counts for aggregation)."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class LossBatch:
    """What a loss reads, right-padded [B, T] (padding and env tokens have mask False; their values never matter).

    The optional fields are filled by the trainer only for losses that name them in ``PolicyLoss.inputs``;
    a new per-token input (behaviour or proximal logprobs of an off-policy loss) is one more optional field.
    """

    logp_new: torch.Tensor  # current policy, carries the gradient
    logp_old: torch.Tensor  # pi_old: the engine's logprobs, or the trainer's recompute
    mask: torch.Tensor  # bool: tokens the policy sampled in this episode (and not masked as stale)
    advantages: torch.Tensor  # [B] (one per sequence) or [B, T] (per token)
    versions: torch.Tensor | None = None  # long: policy version that sampled each token, -1 off-policy tokens
    # the engine's logprobs when logp_old holds a recompute (docs/algorithm.md#the-decoupled-objective)
    logp_behaviour: torch.Tensor | None = None
    lags: torch.Tensor | None = None  # long: trainer version at the step start minus each token's version


OPTIONAL_INPUTS = frozenset(f.name for f in dataclasses.fields(LossBatch) if f.default is None)


@dataclass
class PreparedBatch:
    """Sanitised loss inputs shared by every loss (docs/algorithm.md#the-sequence-ratio)."""

    batch: LossBatch
    logp_new: torch.Tensor  # [B, T] fp32, 0 where masked out
    logp_old: torch.Tensor  # [B, T] fp32, 0 where masked out
    mask: torch.Tensor  # [B, T] bool
    adv_bt: torch.Tensor  # [B, T] fp32, 0 where masked out
    adv_row: torch.Tensor  # [B] fp32: the row's advantage (its first masked token's when given per token)
    lengths: torch.Tensor  # [B] |y_i| clamped to >= 1
    norm: torch.Tensor  # [B] what a row's token sum is divided by: |y_i|, or the loss's constant token_norm
    nonempty: torch.Tensor  # [B] bool
    log_s: torch.Tensor  # [B] sequence log-ratio (eq. 7), carries the gradient; clamped when the loss asks
    clamp_hits: torch.Tensor  # [B] bool: rows whose log s the safety clamp cut


@dataclass
class LossTerms:
    """A loss's per-row surrogate (maximised; the driver negates and divides by N) and its clipped tokens."""

    per_row: torch.Tensor  # [B]
    clipped_bt: torch.Tensor  # [B, T] bool: tokens the clip acted on (clip_frac_token / clip_frac_seq count them)
    per_token: torch.Tensor | None = None  # [B, T] when per_row = per_token.sum(-1) / norm (token-level IS weights)


@dataclass(frozen=True)
class Metric:
    """How one statistic aggregates over micro-batches, mini-batches and ranks.

    ``sum`` adds raw counts/sums (reported only when ``report``); ``max`` keeps the largest value;
    ``ratio`` reports sum(numerator) / sum(denominator) of two ``sum`` statistics.
    """

    kind: Literal["sum", "max", "ratio"]
    numerator: str = ""
    denominator: str = ""
    report: bool = True


def summed(report: bool = False) -> Metric:
    """An additive statistic (a count or a sum), by default only an input of ratios."""
    return Metric("sum", report=report)


def maximum() -> Metric:
    """A statistic reported as its largest value."""
    return Metric("max")


def ratio(numerator: str, denominator: str) -> Metric:
    """A fraction or mean reported as sum(numerator) / sum(denominator)."""
    return Metric("ratio", numerator, denominator)


CLIP_METRICS: dict[str, Metric] = {
    "n_tokens": summed(),
    "n_seqs": summed(),
    "n_clipped_tokens": summed(),
    "n_clipped_seqs": summed(),
    "sum_abs_log_s": summed(),
    "clip_frac_token": ratio("n_clipped_tokens", "n_tokens"),
    "clip_frac_seq": ratio("n_clipped_seqs", "n_seqs"),
    "abs_log_s_mean": ratio("sum_abs_log_s", "n_seqs"),
    "abs_log_s_max": maximum(),
}


OFFPOLICY_METRICS: dict[str, Metric] = {
    "n_tokens": summed(),
    "n_seqs": summed(),
    "n_is_truncated_tokens": summed(),
    "n_is_masked_tokens": summed(),
    "n_is_truncated_seqs": summed(),
    "n_is_masked_seqs": summed(),
    "sum_abs_is_log_ratio": summed(),
    "is_truncated_frac_token": ratio("n_is_truncated_tokens", "n_tokens"),
    "is_masked_frac_token": ratio("n_is_masked_tokens", "n_tokens"),
    "is_truncated_frac_seq": ratio("n_is_truncated_seqs", "n_seqs"),
    "is_masked_frac_seq": ratio("n_is_masked_seqs", "n_seqs"),
    "is_abs_log_ratio_mean": ratio("sum_abs_is_log_ratio", "n_seqs"),
}


def finish_metrics(
    spec: Mapping[str, Metric], sums: Mapping[str, float], maxima: Mapping[str, float]
) -> dict[str, float]:
    """The reported metrics from aggregated sums and maxima: ratios divide, maxima and reported sums pass."""
    out: dict[str, float] = {}
    for name, metric in spec.items():
        if metric.kind == "ratio":
            out[name] = sums.get(metric.numerator, 0.0) / max(sums.get(metric.denominator, 0.0), 1.0)
        elif metric.kind == "max":
            out[name] = maxima.get(name, 0.0)
        elif metric.report:
            out[name] = sums.get(name, 0.0)
    return out


class PolicyLoss(PluginSettings):
    """A registered policy loss: its fields are its settings, ``terms`` its surrogate (docs/algorithm.md#gspo-token).

    Subclasses declare ``kind`` (a Literal with a default), override ``terms``, and may set:
    ``token_advantages`` (False: one advantage per sequence, so per-turn schemes are refused),
    ``inputs`` (optional ``LossBatch`` fields it reads), ``metrics`` (statistics and their
    aggregation; ``statistics`` computes them), and ``problems`` (checks against the rest of the
    algorithm section, reported with the whole config).
    """

    token_advantages: ClassVar[bool] = True
    # default level of the behaviour ratio (docs/algorithm.md#the-decoupled-objective)
    is_level: ClassVar[Level] = "sequence"
    inputs: ClassVar[frozenset[str]] = frozenset()
    metrics: ClassVar[dict[str, Metric]] = CLIP_METRICS

    @abstractmethod
    def terms(self, x: PreparedBatch) -> LossTerms:
        """Each row's surrogate (to maximise) and the tokens the clip acted on."""

    def log_ratio_cap(self) -> float | None:
        """Upper clamp applied to log s before ``terms`` (None: no clamp)."""
        return None

    def problems(self, algo: Any) -> list[Problem]:
        """Problems of this loss combined with the rest of ``algo``, the validated ``AlgorithmConfig`` (empty: fine).

        ``algo`` is untyped here so that the algorithms never import the config sections (which import them).
        """
        scheme = algo.turn_advantage
        if not self.token_advantages and getattr(scheme, "per_turn", False):
            return [
                Problem(
                    "algorithm.turn_advantage",
                    f"{scheme.kind!r} gives per-turn advantages, but loss {self.kind!r} takes one advantage per "
                    "sequence",
                    "use algorithm.loss: gspo_token, or turn_advantage: outcome",
                )
            ]
        return []

    def metric_spec(self, off_policy: OffPolicy | None = None) -> dict[str, Metric]:
        """This loss's statistics, plus the importance-correction ones when ``off_policy`` is decoupled."""
        if off_policy is None or not off_policy.decoupled:
            return dict(self.metrics)
        return {**OFFPOLICY_METRICS, **self.metrics}

    def is_correction_level(self, off_policy: OffPolicy) -> Level:
        """The level of the behaviour ratio: the configured one, else this loss's own (``is_level``)."""
        return off_policy.is_correction.level or self.is_level

    def __call__(
        self, batch: LossBatch, num_sequences: float | None = None, off_policy: OffPolicy | None = None
    ) -> PolicyLossOutput:
        """L = -(1/N) sum_i w_i per_row_i with N = num_sequences or B, and this call's statistics.

        N is docs/algorithm.md#the-divisor-n.

        ``off_policy`` (decoupled): clip against the proximal policy and weight by the behaviour correction.
        """
        missing = sorted(name for name in self.inputs if getattr(batch, name) is None)
        if missing:
            raise ConfigError(f"loss {self.kind!r} needs the inputs {missing}, which this caller did not provide")
        n = float(num_sequences) if num_sequences is not None else float(batch.mask.shape[0])
        if n <= 0:
            raise ConfigError(f"num_sequences={num_sequences} must be > 0 (the rows of the optimizer mini-batch)")
        if off_policy is None or not off_policy.decoupled:
            x = prepare(batch, self)
            terms = self.terms(x)
            per_row, extra = terms.per_row, {}
        else:
            x, terms, per_row, extra = self._decoupled(batch, off_policy)
        loss = -per_row.sum() / n
        stats = {**self.statistics(x, terms), **extra}
        stats.update(finish_metrics(OFFPOLICY_METRICS, stats, {}) if extra else {})
        stats["loss"] = float(loss.detach())
        return PolicyLossOutput(loss=loss, metrics=stats)

    def _decoupled(
        self, batch: LossBatch, off_policy: OffPolicy
    ) -> tuple[PreparedBatch, LossTerms, torch.Tensor, dict[str, float]]:
        """Surrogate against the proximal policy, each row (or token) weighted by the detached behaviour weight."""
        mode = off_policy.proximal
        if off_policy.recomputes and batch.logp_behaviour is None:
            raise ConfigError(f"proximal {mode!r} needs the engine's logprobs (LossBatch.logp_behaviour)")
        mask = batch.mask.bool()
        engine = batch.logp_behaviour if off_policy.recomputes else batch.logp_old
        behaviour = torch.where(mask, engine.float(), 0.0)  # type: ignore[union-attr]
        current = torch.where(mask, batch.logp_new.detach().float(), 0.0)
        proximal = proximal_logprobs(mode, behaviour, current, batch.lags, recomputed=batch.logp_old)
        x = prepare(dataclasses.replace(batch, logp_old=proximal), self)
        terms = self.terms(x)
        level = self.is_correction_level(off_policy)
        corr = behaviour_weights(off_policy.is_correction, level, x.logp_old, behaviour, mask)
        if level == "sequence":
            return x, terms, terms.per_row * corr.weights, corr.stats
        if terms.per_token is None:
            raise ConfigError(
                f"loss {self.kind!r} has no per-token surrogate, so is_correction level 'token' cannot weight it; "
                "use level: sequence"
            )
        return x, terms, (terms.per_token * corr.weights).sum(-1) / x.norm, corr.stats

    def statistics(self, x: PreparedBatch, terms: LossTerms) -> dict[str, float]:
        """Raw statistics of ``metrics`` for this call, plus their ratios and maxima for a one-call caller."""
        with torch.no_grad():
            abs_log_s = x.log_s.detach().abs()[x.nonempty]
            raw = {
                "n_tokens": float(x.mask.sum()),
                "n_seqs": float(x.nonempty.sum()),
                "n_clipped_tokens": float(terms.clipped_bt.sum()),
                "n_clipped_seqs": float((terms.clipped_bt.any(-1) & x.nonempty).sum()),
                "sum_abs_log_s": float(abs_log_s.sum()),
                "n_clamped_seqs": float(x.clamp_hits[x.nonempty].sum()),
            }
            maxima = {"abs_log_s_max": float(abs_log_s.max()) if abs_log_s.numel() else 0.0}
        return {**raw, **finish_metrics(self.metrics, raw, maxima)}


def _advantage_table(advantages: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, T] advantages (0 off-mask) and each row's advantage (its first masked token's when per token)."""
    shape = tuple(mask.shape)
    if advantages.dim() == 1 and advantages.shape[0] == shape[0]:
        adv_row = advantages.detach().float()
        adv_bt = adv_row[:, None].expand(shape)
    elif tuple(advantages.shape) == shape:
        adv_bt = advantages.detach().float()
        adv_row = torch.where(mask, adv_bt, 0.0).gather(1, mask.int().argmax(-1, keepdim=True)).squeeze(1)
    else:
        raise ConfigError(f"advantages must be [B] or [B, T]; got {tuple(advantages.shape)} for logp {shape}")
    return torch.where(mask, adv_bt, 0.0), adv_row


def _check_sequence_advantages(name: str, adv_bt: torch.Tensor, mask: torch.Tensor) -> None:
    big = torch.finfo(torch.float32).max
    spread = torch.where(mask, adv_bt, -big).amax(-1) - torch.where(mask, adv_bt, big).amin(-1)
    if bool(((spread > 1e-6) & mask.any(-1)).any()):
        raise ConfigError(
            f"loss {name!r} takes one advantage per sequence but got advantages that vary within "
            "a row; use loss 'gspo_token' for per-turn advantages, or turn_advantage 'outcome'"
        )


def prepare(batch: LossBatch, loss: PolicyLoss) -> PreparedBatch:
    """Sanitise the inputs and compute log s_i = sum_t m (logp_new - logp_old) / max(|y_i|, 1) (eq. 7, in log space)."""
    logp_new, logp_old, mask = batch.logp_new, batch.logp_old, batch.mask
    if logp_new.shape != logp_old.shape or logp_new.shape != mask.shape:
        raise ConfigError(
            f"logp_new {tuple(logp_new.shape)}, logp_old {tuple(logp_old.shape)} and mask "
            f"{tuple(mask.shape)} must all be [B, T]"
        )
    mask = mask.bool()
    # Sanitise before any arithmetic: padding may hold -inf/-1e10, and 0 * inf = NaN (also in backward).
    lp_new = torch.where(mask, logp_new.float(), 0.0)
    lp_old = torch.where(mask, logp_old.detach().float(), 0.0)
    adv_bt, adv_row = _advantage_table(batch.advantages, mask)
    counts = mask.sum(-1)
    lengths = counts.clamp(min=1).to(lp_new.dtype)
    log_s = (lp_new - lp_old).sum(-1) / lengths  # empty rows -> 0
    cap = loss.log_ratio_cap()
    clamp_hits = torch.zeros_like(log_s, dtype=torch.bool)
    if cap is not None:
        clamp_hits = log_s.detach() > cap
        log_s = log_s.clamp(max=cap)
    if not loss.token_advantages and batch.advantages.dim() == 2:
        _check_sequence_advantages(loss.kind, adv_bt, mask)
    token_norm = getattr(loss, "token_norm", None)
    norm = lengths if token_norm is None else torch.full_like(lengths, float(token_norm))
    return PreparedBatch(batch, lp_new, lp_old, mask, adv_bt, adv_row, lengths, norm, counts > 0, log_s, clamp_hits)


LOSSES: PluginRegistry[PolicyLoss] = PluginRegistry(
    "policy loss", "algorithm.loss", PolicyLoss, "agentrl.algos.register_loss"
)


def register_loss(cls: type[PolicyLoss]) -> type[PolicyLoss]:
    """Register a ``PolicyLoss`` subclass under its ``kind`` (usable as a decorator); returns the class."""
    unknown = sorted(cls.inputs - OPTIONAL_INPUTS)
    if unknown:
        raise ConfigError(
            f"loss {cls.__name__} declares inputs {unknown}, which LossBatch does not carry; "
            f"choose from {sorted(OPTIONAL_INPUTS)}"
        )
    for name, metric in cls.metrics.items():
        parts = [metric.numerator, metric.denominator] if metric.kind == "ratio" else []
        bad = [p for p in parts if cls.metrics.get(p, Metric("max")).kind != "sum"]
        if bad:
            raise ConfigError(f"loss {cls.__name__}: ratio metric {name!r} needs sum statistics {bad} in its metrics")
    return LOSSES.register(cls)
