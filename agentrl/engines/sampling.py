"""Batched token sampling with SGLang's logprob semantics.

The returned logprob of a sampled token is ``log_softmax(logits.float() / T)`` over the full vocabulary
(greedy rows, T=0, use T=1); top-k/top-p filter only a copy used to draw the sample (SGLANG.md §3).
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


def sample_tokens(logits_bv: torch.Tensor, rows: list[RowSampling], default_gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; returns (token ids ``[B]``, their float32 logprobs ``[B]``)."""
    logits_bv = logits_bv.float()
    device = logits_bv.device
    greedy = [r.temperature < 1e-6 for r in rows]
    temps = [1.0 if g else r.temperature for r, g in zip(rows, greedy)]
    if all(t == temps[0] for t in temps):  # one temperature (the RL case): a scalar divide, same numbers
        logprobs_bv = torch.log_softmax(logits_bv if temps[0] == 1.0 else logits_bv / temps[0], dim=-1)
    else:
        logprobs_bv = torch.log_softmax(logits_bv / torch.tensor(temps, device=device)[:, None], dim=-1)
    scores_bv = _filter_top_k_top_p(logprobs_bv, rows)
    uniform_b = torch.rand(len(rows), generator=default_gen, device=device)
    for i, row in enumerate(rows):
        if row.generator is not None:  # a seeded request draws from its own stream, whatever the batch
            uniform_b[i] = torch.rand((), generator=row.generator, device=device)
    # scores are (filtered) logprobs <= 0, so exp() cannot overflow; the CDF need not be normalised
    sampled_b = _inverse_cdf(scores_bv.exp(), uniform_b)
    if any(greedy):
        sampled_b = torch.where(torch.tensor(greedy, device=device), torch.argmax(logits_bv, dim=-1), sampled_b)
    token_logprobs_b = logprobs_bv.gather(1, sampled_b[:, None]).squeeze(1)
    return sampled_b, token_logprobs_b


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
