"""The bundled policy losses GSPO, GSPO-token and GRPO (docs/algorithm.md#the-gspo-objective), and ``policy_loss``.

Each is a registered ``PolicyLoss``: its clip range (and, for the sequence-ratio losses, the
optional safety clamp on log s) are its settings, validated where the config names the loss.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, ValidationError, field_validator

from agentrl.algos.loss_base import (
    CLIP_METRICS,
    LOSSES,
    LossBatch,
    LossTerms,
    Metric,
    PolicyLoss,
    PolicyLossOutput,
    PreparedBatch,
    ratio,
    summed,
)
from agentrl.errors import ConfigError


def clipped(ratio_: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """True where the clipped branch of min(r A, clip(r) A) is strictly active (gradient cut)."""
    return ((adv > 0) & (ratio_ > 1 + eps_high)) | ((adv < 0) & (ratio_ < 1 - eps_low))


def surrogate(ratio_: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """min(r A, clip(r, 1-eps_low, 1+eps_high) A): the PPO-style pessimistic surrogate (eq. 5)."""
    return torch.minimum(ratio_ * adv, ratio_.clamp(1 - eps_low, 1 + eps_high) * adv)


class ClippedLoss(PolicyLoss):
    """A PPO-style clipped surrogate: ratios outside [1 - eps_low, 1 + eps_high] stop the gradient."""

    eps_low: float = Field(
        3e-4, description="Lower clip range: ratios below 1 - eps_low are clipped (GSPO paper: 3e-4)."
    )
    eps_high: float = Field(4e-4, description="Upper clip range: ratios above 1 + eps_high are clipped (GSPO: 4e-4).")
    token_norm: int | None = Field(
        None,
        ge=1,
        description="What a row's sum over its tokens is divided by. None: its own length |y_i| (GSPO eq. 13, GRPO), "
        "so a token of a long response weighs less than one of a short response; a number L: L for every row "
        "(Dr. GRPO's constant, Liu et al. 2025), so every sampled token weighs the same and a long failing "
        "response is pushed down as hard per token as a short one.",
    )

    @field_validator("eps_low")
    @classmethod
    def _eps_low_in_unit_interval(cls, value: float) -> float:
        if not 0.0 < value < 1.0:
            raise ValueError(f"eps_low={value} must lie in (0, 1): the lower clip bound 1 - eps_low must stay positive")
        return value

    @field_validator("eps_high")
    @classmethod
    def _eps_high_positive(cls, value: float) -> float:
        if not value > 0.0:
            raise ValueError(f"eps_high={value} must be > 0")
        return value


class SequenceRatioLoss(ClippedLoss):
    """A clipped loss on the sequence ratio s_i, with an optional safety clamp on log s.

    The clamp is docs/algorithm.md#the-safety-clamp.
    """

    log_ratio_clamp: float | None = Field(
        None, ge=10.0, description="Optional safety clamp on log s (>= 10); off by default."
    )
    metrics: ClassVar[dict[str, Metric]] = {
        **CLIP_METRICS,
        "n_clamped_seqs": summed(),
        "log_ratio_clamp_frac": ratio("n_clamped_seqs", "n_seqs"),
    }

    def log_ratio_cap(self) -> float | None:
        """The configured clamp on log s."""
        return self.log_ratio_clamp


class GSPO(SequenceRatioLoss):
    """Sequence-level GSPO (eq. 5): one ratio s_i and one advantage A_i per row."""

    kind: Literal["gspo"] = "gspo"
    token_advantages: ClassVar[bool] = False

    @field_validator("token_norm")
    @classmethod
    def _no_token_sum(cls, value: int | None) -> int | None:
        if value is not None:
            raise ValueError(
                "gspo has no sum over tokens to normalise (its 1/|y_i| is inside the sequence ratio s_i); remove "
                "token_norm or use gspo_token"
            )
        return value

    def terms(self, x: PreparedBatch) -> LossTerms:
        """min(s_i A_i, clip(s_i) A_i) per row; every token of a clipped row is clipped."""
        s_i = x.log_s.exp()
        per_seq = torch.where(x.nonempty, surrogate(s_i, x.adv_row, self.eps_low, self.eps_high), 0.0)
        clipped_bt = clipped(s_i, x.adv_row, self.eps_low, self.eps_high)[:, None] & x.mask
        return LossTerms(per_seq, clipped_bt)


class GSPOToken(SequenceRatioLoss):
    """GSPO-token (eqs. 13-14): log s_it = sg[log s_i] + logp_it - sg[logp_it], clipped per token."""

    kind: Literal["gspo_token"] = "gspo_token"

    def terms(self, x: PreparedBatch) -> LossTerms:
        """(1/|y_i|) sum_t min(s_it A_it, clip(s_it) A_it) (or 1/token_norm); clipping is decided per token by the
        sign of A_it.

        A row the safety clamp cut (log s_i > c) has a constant log s, so its tokens get no gradient
        (docs/algorithm.md#the-safety-clamp):
        the per-token path logp_it - sg[logp_it] is removed there too, as GSPO's clamp removes it.
        """
        per_token_path = x.logp_new - x.logp_new.detach()
        per_token_path = torch.where(x.clamp_hits[:, None], torch.zeros_like(per_token_path), per_token_path)
        log_s_it = x.log_s.detach()[:, None] + per_token_path
        s_it = log_s_it.exp()
        per_tok = torch.where(x.mask, surrogate(s_it, x.adv_bt, self.eps_low, self.eps_high), 0.0)
        clipped_bt = clipped(s_it.detach(), x.adv_bt, self.eps_low, self.eps_high) & x.mask
        return LossTerms(per_tok.sum(-1) / x.norm, clipped_bt, per_tok)


class GRPO(ClippedLoss):
    """GRPO (contrast): per-token ratio w_it = exp(logp_new_it - logp_old_it), sequence-mean over tokens."""

    kind: Literal["grpo"] = "grpo"
    is_level: ClassVar[Literal["token", "sequence"]] = "token"
    eps_low: float = Field(0.2, description="Lower clip range of the per-token ratio (GRPO/PPO: 0.2).")
    eps_high: float = Field(0.28, description="Upper clip range of the per-token ratio (DAPO's clip-higher: 0.28).")
    unknown_key_hints: ClassVar[dict[str, str]] = {
        "log_ratio_clamp": "grpo has no sequence log-ratio to clamp (its ratios are per token); remove it or use "
        "gspo/gspo_token."
    }

    def terms(self, x: PreparedBatch) -> LossTerms:
        """(1/|y_i|) sum_t min(w_it A_it, clip(w_it) A_it) (or 1/token_norm)."""
        w_it = (x.logp_new - x.logp_old).exp()
        per_tok = torch.where(x.mask, surrogate(w_it, x.adv_bt, self.eps_low, self.eps_high), 0.0)
        clipped_bt = clipped(w_it.detach(), x.adv_bt, self.eps_low, self.eps_high) & x.mask
        return LossTerms(per_tok.sum(-1) / x.norm, clipped_bt, per_tok)


def make_loss(variant: str, **settings: Any) -> PolicyLoss:
    """The registered loss ``variant`` with ``settings`` (None values keep their defaults); ConfigError if invalid."""
    cls = LOSSES.get(variant)
    given = {k: v for k, v in settings.items() if v is not None}
    try:
        return cls(**given)
    except ValidationError as exc:
        details = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise ConfigError(f"loss {variant!r} settings {given} are invalid: {details}") from exc


def policy_loss(
    variant: Literal["gspo", "gspo_token", "grpo"],
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    num_sequences: int | None = None,
    log_ratio_clamp: float | None = None,
) -> PolicyLossOutput:
    """L = -(1/N) sum_i (per-row surrogate) for the named variant; N = num_sequences or B.

    N is docs/algorithm.md#the-divisor-n.
    """
    loss = make_loss(variant, eps_low=eps_low, eps_high=eps_high, log_ratio_clamp=log_ratio_clamp)
    return loss(LossBatch(logp_new, logp_old, mask, advantages), num_sequences)
