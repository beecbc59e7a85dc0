"""Batched token sampling with SGLang's logprob semantics.

The returned logprob of a sampled token is ``log(softmax(logits.float() / T))`` over the full vocabulary
(greedy rows, T=0, use T=1); top-k/top-p filter only a copy used to draw the sample
(docs/engines.md#what-an-engines-logprobs-mean).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

_FLAT_CDF_MAX_VOCAB = 16384  # measured crossover on CPU: below it one flat cumsum beats the two-level search


@dataclass
class RowSampling:
    """The sampling settings of one batch row."""

    temperature: float
    top_k: int
    top_p: float
    generator: torch.Generator | None


class SamplingPlan:
    """The per-row settings of one batch as tensors, built once while the batch keeps its rows.

    The scheduler rebuilds it when a request joins or leaves, so a decode step pays no per-row Python.
    """

    def __init__(self, rows: list[RowSampling], device: torch.device) -> None:
        greedy = [r.temperature < 1e-6 for r in rows]
        temps = [1.0 if g else r.temperature for r, g in zip(rows, greedy)]
        # one temperature (the RL case): a scalar divide, same numbers as the per-row one
        self.temperature: float | torch.Tensor = (
            temps[0] if all(t == temps[0] for t in temps) else torch.tensor(temps, device=device)[:, None]
        )
        self.greedy_b: torch.Tensor | None = torch.tensor(greedy, device=device) if any(greedy) else None
        self.rows = rows
        self.filtered = any(0 < r.top_k or r.top_p < 1.0 for r in rows)
        self.seeded = [(i, r.generator) for i, r in enumerate(rows) if r.generator is not None]
        self.size = len(rows)


def sample_tokens(
    logits_bv: torch.Tensor, rows: list[RowSampling] | SamplingPlan, default_gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; returns (token ids ``[B]``, their float32 logprobs ``[B]``).

    The logprob is ``log(softmax(logits / T)[token])``, SGLang's own computation
    (docs/engines.md#what-an-engines-logprobs-mean); a token whose probability is too small for that to be
    exact (below 1e-30) gets ``log_softmax`` instead.
    """
    logits_bv = logits_bv.float()
    device = logits_bv.device
    plan = rows if isinstance(rows, SamplingPlan) else SamplingPlan(rows, device)
    temperature = plan.temperature
    scaled_bv = logits_bv if isinstance(temperature, float) and temperature == 1.0 else logits_bv / temperature
    probs_bv = torch.softmax(scaled_bv, dim=-1)
    draw_bv = _filter_top_k_top_p(probs_bv, plan.rows) if plan.filtered else probs_bv
    uniform_b = torch.rand(plan.size, generator=default_gen, device=device)
    for i, generator in plan.seeded:  # a seeded request draws from its own stream, whatever the batch
        uniform_b[i] = torch.rand((), generator=generator, device=device)
    sampled_b = _inverse_cdf(draw_bv, uniform_b)
    if plan.greedy_b is not None:
        sampled_b = torch.where(plan.greedy_b, torch.argmax(logits_bv, dim=-1), sampled_b)
    return sampled_b, token_logprobs(probs_bv, scaled_bv, sampled_b)


def token_logprobs(probs_bv: torch.Tensor, scaled_logits_bv: torch.Tensor, tokens_b: torch.Tensor) -> torch.Tensor:
    """``log(probs[token])`` per row; rows whose token has probability below 1e-30, where float32 ``log(p)``
    loses precision (or p underflowed to 0), take ``log_softmax`` of the scaled logits instead."""
    token_probs_b1 = probs_bv.gather(1, tokens_b[:, None])
    logprobs_b = token_probs_b1.log().squeeze(1)
    tiny_b = token_probs_b1.squeeze(1) < 1e-30
    if bool(tiny_b.any()):
        exact_b = torch.log_softmax(scaled_logits_bv[tiny_b], dim=-1).gather(1, tokens_b[tiny_b][:, None]).squeeze(1)
        logprobs_b[tiny_b] = exact_b
    return logprobs_b


def _inverse_cdf(probs_bv: torch.Tensor, uniform_b: torch.Tensor, block: int = 64) -> torch.Tensor:
    """Token ``i`` with ``cdf[i-1] <= u * total < cdf[i]``: one uniform per row (cheap on CPU, where
    exponential_/multinomial are slow). A zero-probability token is never drawn: searches use right=True
    (a flat CDF step is skipped) and are clamped to the last token with mass (u * total may round to total).
    """
    rows, vocab = probs_bv.shape
    if vocab <= _FLAT_CDF_MAX_VOCAB:
        cdf_bv = probs_bv.cumsum(-1)
        drawn_b1 = torch.searchsorted(cdf_bv, uniform_b[:, None] * cdf_bv[:, -1:], right=True).clamp_(max=vocab - 1)
        if bool((probs_bv.gather(1, drawn_b1) == 0).any()):  # rare: the target rounded up to the total
            drawn_b1 = drawn_b1.minimum((cdf_bv < cdf_bv[:, -1:]).sum(-1, keepdim=True))
        return drawn_b1.squeeze(1)
    # large vocabularies: a full-width cumsum is slow on CPU, so search block sums, then one block
    num_blocks = -(-vocab // block)
    blocks_bnk = F.pad(probs_bv, (0, num_blocks * block - vocab)).view(rows, num_blocks, block)
    block_cdf_bn = blocks_bnk.sum(-1).cumsum(-1)
    target_b1 = uniform_b[:, None] * block_cdf_bn[:, -1:]
    last_block_b1 = (block_cdf_bn < block_cdf_bn[:, -1:]).sum(-1, keepdim=True)
    blk_b1 = torch.searchsorted(block_cdf_bn, target_b1, right=True).minimum(last_block_b1)
    before_b1 = (block_cdf_bn.gather(1, (blk_b1 - 1).clamp(min=0)) * (blk_b1 > 0)).to(probs_bv.dtype)
    inner_bk = blocks_bnk.gather(1, blk_b1[:, :, None].expand(rows, 1, block)).squeeze(1).cumsum(-1)
    last_tok_b1 = (inner_bk < inner_bk[:, -1:]).sum(-1, keepdim=True)
    idx_b1 = torch.searchsorted(inner_bk, target_b1 - before_b1, right=True).minimum(last_tok_b1)
    return (blk_b1 * block + idx_b1).squeeze(1)


def _filter_top_k_top_p(probs_bv: torch.Tensor, rows: list[RowSampling]) -> torch.Tensor:
    """Return probabilities with tokens outside each row's top-k / top-p set at 0 (a copy)."""
    vocab = probs_bv.shape[-1]
    top_k = [r.top_k if 0 < r.top_k < vocab else vocab for r in rows]
    device = probs_bv.device
    sorted_bv, order_bv = torch.sort(probs_bv, dim=-1, descending=True)
    rank = torch.arange(vocab, device=device)[None, :]
    keep_bv = rank < torch.tensor(top_k, device=device)[:, None]
    mass_before_bv = torch.cumsum(sorted_bv, dim=-1) - sorted_bv
    p_b = torch.tensor([r.top_p for r in rows], dtype=probs_bv.dtype, device=device)[:, None]
    keep_bv &= (mass_before_bv < p_b) | (p_b >= 1.0)
    return torch.zeros_like(probs_bv).scatter_(1, order_bv, sorted_bv * keep_bv)
