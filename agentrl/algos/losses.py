"""Policy losses GSPO, GSPO-token and GRPO over padded tensors (GSPO.md sections 2.3-2.5).

Invariants: all ratio arithmetic is fp32 on masked log-differences selected with ``where`` (never
products of probabilities, never mask multiplication); the loss is divided by N, the number of
rows of the optimizer mini-batch (empty rows included), so micro-batch splits sum to the same loss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import torch

from agentrl.errors import ConfigError, did_you_mean


@dataclass
class PolicyLossOutput:
    """The scalar loss to minimise and float metrics (fractions plus raw counts for aggregation)."""

    loss: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class _Inputs:
    """Sanitised loss inputs shared by every variant."""

    logp_new: torch.Tensor  # [B, T] fp32, 0 where masked out
    logp_old: torch.Tensor  # [B, T] fp32, 0 where masked out
    mask: torch.Tensor  # [B, T] bool
    adv_bt: torch.Tensor  # [B, T] fp32, 0 where masked out
    adv_row: torch.Tensor  # [B] fp32: the row's advantage (its first masked token's when given per token)
    lengths: torch.Tensor  # [B] |y_i| clamped to >= 1
    nonempty: torch.Tensor  # [B] bool
    log_s: torch.Tensor  # [B] sequence log-ratio (eq. 7), carries the gradient


def _clipped(ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """True where the clipped branch of min(r A, clip(r) A) is strictly active (gradient cut)."""
    return ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))


def _surrogate(ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float) -> torch.Tensor:
    """min(r A, clip(r, 1-eps_low, 1+eps_high) A): the PPO-style pessimistic surrogate (eq. 5)."""
    return torch.minimum(ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)


def _gspo(x: _Inputs, eps_low: float, eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence-level GSPO (eq. 5): one ratio s_i and one advantage A_i per row."""
    adv_i = x.adv_row  # row-constant by _prepare's check
    s_i = x.log_s.exp()
    per_seq = torch.where(x.nonempty, _surrogate(s_i, adv_i, eps_low, eps_high), 0.0)
    clipped_bt = _clipped(s_i, adv_i, eps_low, eps_high)[:, None] & x.mask
    return per_seq, clipped_bt


def _gspo_token(x: _Inputs, eps_low: float, eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO-token (eqs. 13-14): log s_it = sg[log s_i] + logp_it - sg[logp_it], clipped per token."""
    log_s_it = x.log_s.detach()[:, None] + x.logp_new - x.logp_new.detach()
    s_it = log_s_it.exp()
    per_tok = torch.where(x.mask, _surrogate(s_it, x.adv_bt, eps_low, eps_high), 0.0)
    clipped_bt = _clipped(s_it.detach(), x.adv_bt, eps_low, eps_high) & x.mask
    return per_tok.sum(-1) / x.lengths, clipped_bt


def _grpo(x: _Inputs, eps_low: float, eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (contrast): per-token ratio w_it = exp(logp_new_it - logp_old_it), sequence-mean over tokens."""
    w_it = (x.logp_new - x.logp_old).exp()
    per_tok = torch.where(x.mask, _surrogate(w_it, x.adv_bt, eps_low, eps_high), 0.0)
    clipped_bt = _clipped(w_it.detach(), x.adv_bt, eps_low, eps_high) & x.mask
    return per_tok.sum(-1) / x.lengths, clipped_bt


POLICY_LOSSES: dict[str, Callable[[_Inputs, float, float], tuple[torch.Tensor, torch.Tensor]]] = {
    "gspo": _gspo,
    "gspo_token": _gspo_token,
    "grpo": _grpo,
}


def check_loss_settings(variant: str, eps_low: float, eps_high: float) -> None:
    """Raise ConfigError for an unknown variant or a clip range outside (0, 1) / (0, inf)."""
    if variant not in POLICY_LOSSES:
        raise ConfigError(
            f"policy loss {variant!r} is unknown; choose one of {sorted(POLICY_LOSSES)} (algorithm.loss)."
            + did_you_mean(variant, POLICY_LOSSES)
        )
    if not 0.0 < eps_low < 1.0:
        raise ConfigError(f"eps_low={eps_low} must lie in (0, 1): the lower clip bound 1 - eps_low must stay positive")
    if not eps_high > 0.0:
        raise ConfigError(f"eps_high={eps_high} must be > 0")


def _prepare(
    variant: str,
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    log_ratio_clamp: float | None,
) -> tuple[_Inputs, torch.Tensor]:
    if logp_new.shape != logp_old.shape or logp_new.shape != mask.shape:
        raise ConfigError(
            f"logp_new {tuple(logp_new.shape)}, logp_old {tuple(logp_old.shape)} and mask "
            f"{tuple(mask.shape)} must all be [B, T]"
        )
    mask = mask.bool()
    # Sanitise before any arithmetic: padding may hold -inf/-1e10, and 0 * inf = NaN (also in backward).
    lp_new = torch.where(mask, logp_new.float(), 0.0)
    lp_old = torch.where(mask, logp_old.detach().float(), 0.0)
    if advantages.dim() == 1:
        adv_bt = advantages.detach().float()[:, None].expand_as(lp_new)
    elif advantages.shape == mask.shape:
        adv_bt = advantages.detach().float()
    else:
        raise ConfigError(
            f"advantages must be [B] or [B, T]; got {tuple(advantages.shape)} for logp {tuple(mask.shape)}"
        )
    adv_bt = torch.where(mask, adv_bt, 0.0)
    first = mask.int().argmax(-1, keepdim=True)
    adv_row = advantages.detach().float() if advantages.dim() == 1 else adv_bt.gather(1, first).squeeze(1)
    counts = mask.sum(-1)
    lengths = counts.clamp(min=1).to(lp_new.dtype)
    log_s = (lp_new - lp_old).sum(-1) / lengths  # eq. 7 in log space; empty rows -> 0
    clamp_hits = torch.zeros_like(log_s, dtype=torch.bool)
    if log_ratio_clamp is not None:
        clamp_hits = log_s.detach() > log_ratio_clamp
        log_s = log_s.clamp(max=log_ratio_clamp)
    if variant == "gspo" and advantages.dim() == 2:
        big = torch.finfo(torch.float32).max
        spread = torch.where(mask, adv_bt, -big).amax(-1) - torch.where(mask, adv_bt, big).amin(-1)
        if bool(((spread > 1e-6) & (counts > 0)).any()):
            raise ConfigError(
                "loss 'gspo' takes one advantage per sequence but got advantages that vary within "
                "a row; use loss 'gspo_token' for per-turn advantages, or turn_advantage 'outcome'"
            )
    return _Inputs(lp_new, lp_old, mask, adv_bt, adv_row, lengths, counts > 0, log_s), clamp_hits


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
    """L = -(1/N) sum_i (per-row surrogate) for the named variant; N = num_sequences or B (GSPO.md 2.4)."""
    check_loss_settings(variant, eps_low, eps_high)
    x, clamp_hits = _prepare(variant, logp_new, logp_old, mask, advantages, log_ratio_clamp)
    n = float(num_sequences) if num_sequences is not None else float(mask.shape[0])
    if n <= 0:
        raise ConfigError(f"num_sequences={num_sequences} must be > 0 (the rows of the optimizer mini-batch)")
    per_seq, clipped_bt = POLICY_LOSSES[variant](x, eps_low, eps_high)
    loss = -per_seq.sum() / n
    return PolicyLossOutput(loss=loss, metrics=_metrics(x, clipped_bt, clamp_hits, loss))


def _metrics(x: _Inputs, clipped_bt: torch.Tensor, clamp_hits: torch.Tensor, loss: torch.Tensor) -> dict[str, float]:
    """Clip fractions by token and sequence, |log s| stats, and raw counts so callers can aggregate."""
    with torch.no_grad():
        n_tok = int(x.mask.sum())
        n_seq = int(x.nonempty.sum())
        abs_log_s = x.log_s.detach().abs()[x.nonempty]
        clipped_tok = int(clipped_bt.sum())
        clipped_seq = int((clipped_bt.any(-1) & x.nonempty).sum())
        return {
            "loss": float(loss.detach()),
            "clip_frac_token": clipped_tok / max(n_tok, 1),
            "clip_frac_seq": clipped_seq / max(n_seq, 1),
            "abs_log_s_mean": float(abs_log_s.mean()) if n_seq else 0.0,
            "abs_log_s_max": float(abs_log_s.max()) if n_seq else 0.0,
            "log_ratio_clamp_frac": float(clamp_hits[x.nonempty].float().mean()) if n_seq else 0.0,
            "n_tokens": float(n_tok),
            "n_seqs": float(n_seq),
            "n_clipped_tokens": float(clipped_tok),
            "n_clipped_seqs": float(clipped_seq),
            "sum_abs_log_s": float(abs_log_s.sum()),
        }
