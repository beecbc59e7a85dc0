"""The decoupled objective's behaviour, proximal and current policies (docs/algorithm.md#the-decoupled-objective).

The loss clips against the proximal policy p and weights each row (or token) by a detached
importance correction between p and the behaviour policy b (the engine's logprobs, sampled by
version v_it). Invariants: with ``proximal: behaviour`` and ``is_correction: none``, or with every
lag 0 and ``proximal: interpolate``, the loss equals the synchronous loss exactly (p == b bit for bit,
w == 1); all ratio arithmetic is fp32 on masked log-differences selected with ``where``.
The settings (``OffPolicy`` and the corrections) live in ``agentrl.algos.offpolicy_config``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentrl.algos.offpolicy_config import (
    RECOMPUTED_PROXIMAL,
    ISCorrection,
    ISCorrectionBase,
    Level,
    MaskedIS,
    NoCorrection,
    OffPolicy,
    Proximal,
    TruncatedIS,
)

__all__ = [
    "Correction",
    "ISCorrection",
    "Level",
    "MaskedIS",
    "NoCorrection",
    "OffPolicy",
    "Proximal",
    "TruncatedIS",
    "behaviour_weights",
    "lag_stats",
    "proximal_logprobs",
]


def proximal_logprobs(
    mode: Proximal,
    behaviour: torch.Tensor,
    current: torch.Tensor,
    lags: torch.Tensor | None,
    recomputed: torch.Tensor | None = None,
) -> torch.Tensor:
    """p_it by ``mode`` (docs/algorithm.md#the-decoupled-objective); detached.

    ``recomputed`` is the step-start trainer forward.

    interpolate: alpha = lag / (lag + 1), p = b + alpha (sg[c] - b); lag 0 gives p == b exactly.
    """
    if mode == "behaviour":
        return behaviour.detach()
    if mode in RECOMPUTED_PROXIMAL:  # recompute_stale: the caller left a fresh row's behaviour in ``recomputed``
        if recomputed is None:
            raise ValueError(f"proximal {mode!r} needs the step-start trainer logprobs (recomputed=...)")
        return recomputed.detach()
    if lags is None:
        raise ValueError("proximal 'interpolate' needs each token's version lag (lags=...)")
    lag = lags.clamp(min=0).to(torch.float32)
    alpha = lag / (lag + 1.0)
    return behaviour.detach() + alpha * (current.detach() - behaviour.detach())


@dataclass
class Correction:
    """The behaviour weights of a batch and what they did (counts over real tokens/rows)."""

    weights: torch.Tensor  # [B] (sequence level) or [B, T] (token level), detached
    stats: dict[str, float]


def behaviour_weights(
    correction: ISCorrectionBase, level: Level, proximal: torch.Tensor, behaviour: torch.Tensor, mask: torch.Tensor
) -> Correction:
    """w from ratio = proximal / behaviour at ``level``; masked-out positions get weight 1 and count nowhere."""
    mask = mask.bool()
    diff = torch.where(mask, proximal.detach().float() - behaviour.detach().float(), 0.0)
    counts = mask.sum(-1)
    nonempty = counts > 0
    seq_log_ratio = diff.sum(-1) / counts.clamp(min=1)
    with torch.no_grad():
        if level == "sequence":
            weights, truncated, masked = correction.weights(seq_log_ratio.exp())
            weights = torch.where(nonempty, weights, 1.0)
            trunc_bt = truncated[:, None] & mask
            mask_bt = masked[:, None] & mask
        else:
            weights, trunc_bt, mask_bt = correction.weights(diff.exp())
            weights = torch.where(mask, weights, 1.0)
            trunc_bt, mask_bt = trunc_bt & mask, mask_bt & mask
        stats = {
            "n_is_truncated_tokens": float(trunc_bt.sum()),
            "n_is_masked_tokens": float(mask_bt.sum()),
            "n_is_truncated_seqs": float((trunc_bt.any(-1) & nonempty).sum()),
            "n_is_masked_seqs": float((mask_bt.any(-1) & nonempty).sum()),
            "sum_abs_is_log_ratio": float(seq_log_ratio[nonempty].abs().sum()),
        }
    return Correction(weights, stats)


def lag_stats(lags: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Sum and max of the version lag over the trained (masked) tokens."""
    lag = torch.where(mask.bool(), lags.clamp(min=0), 0)
    return {"sum_token_lag": float(lag.sum()), "max_token_lag": float(lag.max()) if lag.numel() else 0.0}
