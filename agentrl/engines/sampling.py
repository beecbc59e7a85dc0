"""Batched token sampling with SGLang's logprob semantics.

The returned logprob of a sampled token is ``log_softmax(logits.float() / T)`` over the full vocabulary
(greedy rows, T=0, use T=1); top-k/top-p filter only a copy used to draw the sample (SGLANG.md §3).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RowSampling:
    """The sampling settings of one batch row."""

    temperature: float
    top_k: int
    top_p: float
    generator: torch.Generator | None


def sample_tokens(logits_bv: torch.Tensor, rows: list[RowSampling], default_gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; returns (token ids ``[B]``, their float32 logprobs ``[B]``)."""
    logits_bv = logits_bv.float()
    device = logits_bv.device
    temps = torch.tensor([r.temperature for r in rows], dtype=torch.float32, device=device)
    greedy_b = temps < 1e-6
    temps = torch.where(greedy_b, torch.ones_like(temps), temps)
    logprobs_bv = torch.log_softmax(logits_bv / temps[:, None], dim=-1)
    scores_bv = _filter_top_k_top_p(logprobs_bv, rows)
    # inverse-CDF draw: one uniform per row (cheap on CPU, where exponential_/multinomial are slow)
    # scores are (filtered) logprobs <= 0, so exp() cannot overflow; the CDF need not be normalised
    cdf_bv = torch.cumsum(scores_bv.exp(), dim=-1)
    uniform_b = torch.rand(len(rows), generator=default_gen, device=device)
    for i, row in enumerate(rows):
        if row.generator is not None:  # a seeded request draws from its own stream, whatever the batch
            uniform_b[i] = torch.rand((), generator=row.generator, device=device)
    # right=True: a zero-probability token (flat CDF step) can never be drawn
    sampled_b = torch.searchsorted(cdf_bv, (uniform_b * cdf_bv[:, -1])[:, None], right=True).squeeze(1)
    sampled_b = sampled_b.clamp(max=cdf_bv.shape[-1] - 1)
    if bool(greedy_b.any()):
        sampled_b = torch.where(greedy_b, torch.argmax(logits_bv, dim=-1), sampled_b)
    token_logprobs_b = logprobs_bv.gather(1, sampled_b[:, None]).squeeze(1)
    return sampled_b, token_logprobs_b


def _filter_top_k_top_p(logprobs_bv: torch.Tensor, rows: list[RowSampling]) -> torch.Tensor:
    """Return logprobs with tokens outside each row's top-k / top-p set at -inf (a copy if any)."""
    vocab = logprobs_bv.shape[-1]
    top_k = [r.top_k if 0 < r.top_k < vocab else vocab for r in rows]
    top_p = [r.top_p for r in rows]
    if all(k == vocab for k in top_k) and all(p >= 1.0 for p in top_p):
        return logprobs_bv
    device = logprobs_bv.device
    sorted_bv, order_bv = torch.sort(logprobs_bv, dim=-1, descending=True)
    rank = torch.arange(vocab, device=device)[None, :]
    keep_bv = rank < torch.tensor(top_k, device=device)[:, None]
    probs_bv = sorted_bv.exp()
    mass_before_bv = torch.cumsum(probs_bv, dim=-1) - probs_bv
    p_b = torch.tensor(top_p, dtype=probs_bv.dtype, device=device)[:, None]
    keep_bv &= (mass_before_bv < p_b) | (p_b >= 1.0)
    filtered_sorted = torch.where(keep_bv, sorted_bv, torch.full_like(sorted_bv, float("-inf")))
    return torch.empty_like(logprobs_bv).scatter_(1, order_bv, filtered_sorted)
