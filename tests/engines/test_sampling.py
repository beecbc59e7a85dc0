"""The inverse-CDF draw (flat and two-level): the right distribution, zero-probability tokens never drawn."""

from __future__ import annotations

import pytest
import torch

from agentrl.engines.embedded.sampling import RowSampling, SamplingPlan, _inverse_cdf, sample_tokens, token_logprobs

VOCABS = [300, 20000]  # below and above the flat-cumsum cutoff; neither a multiple of the block size


@pytest.mark.parametrize("vocab", VOCABS)
def test_inverse_cdf_matches_an_exact_cdf_search(vocab: int) -> None:
    gen = torch.Generator().manual_seed(0)
    probs_bv = torch.rand(64, vocab, generator=gen) ** 4
    uniform_b = torch.rand(64, generator=gen)
    cdf_bv = probs_bv.double().cumsum(-1)
    exact = torch.searchsorted(cdf_bv, (uniform_b.double() * cdf_bv[:, -1])[:, None], right=True).squeeze(1)
    got = _inverse_cdf(probs_bv, uniform_b)
    assert (got - exact).abs().max().item() <= 1  # equal up to float rounding at a token boundary
    assert (got == exact).float().mean().item() > 0.9


@pytest.mark.parametrize("vocab", VOCABS)
def test_zero_probability_tokens_are_never_drawn(vocab: int) -> None:
    probs_bv = torch.zeros(6, vocab)
    probs_bv[:, [3, 70, 130]] = torch.tensor([0.2, 0.5, 0.3])
    uniform_b = torch.tensor([0.0, 0.1999, 0.2, 0.69999, 0.99999994, 1.0])  # edges, incl. u * total == total
    assert _inverse_cdf(probs_bv, uniform_b).tolist() == [3, 3, 70, 70, 130, 130]


@pytest.mark.parametrize("vocab", VOCABS)
def test_sample_frequencies_follow_the_tempered_distribution(vocab: int) -> None:
    logits = torch.full((1, vocab), -30.0)
    logits[0, :150] = torch.randn(150, generator=torch.Generator().manual_seed(1)) * 2
    rows = [RowSampling(0.7, -1, 1.0, None)] * 4000
    tokens, logprobs = sample_tokens(logits.expand(4000, -1), rows, torch.Generator().manual_seed(2))
    expected = torch.softmax(logits[0] / 0.7, -1)[:150]
    observed = torch.bincount(tokens, minlength=vocab).float()[:150] / 4000
    assert (observed - expected).abs().max().item() < 0.03
    assert torch.allclose(logprobs, torch.log_softmax(logits[0] / 0.7, -1)[tokens])


def test_token_logprobs_are_exact_down_to_underflowing_probabilities() -> None:
    """log(softmax) is SGLang's computation; tokens with p < 1e-30 (or p == 0 in float32) fall back to log_softmax."""
    logits = torch.tensor([[0.0, -10.0, -75.0, -120.0], [3.0, 2.0, 1.0, -200.0]])
    probs = torch.softmax(logits, -1)
    tokens = torch.tensor([2, 3])  # p ~ 3e-33 and p == 0 after float32 underflow
    assert probs[1, 3].item() == 0.0
    got = token_logprobs(probs, logits, tokens)
    exact = torch.log_softmax(logits.double(), -1).gather(1, tokens[:, None]).squeeze(1)
    assert torch.isfinite(got).all()
    assert (got.double() - exact).abs().max().item() < 1e-4
    common = token_logprobs(probs, logits, torch.tensor([1, 0]))  # ordinary tokens: plain log(p)
    assert torch.equal(common, probs.gather(1, torch.tensor([[1], [0]])).log().squeeze(1))


def test_a_batch_with_mixed_settings_samples_each_row_by_its_own_rules() -> None:
    """Greedy, top-k=1 and tempered rows share one plan; logprobs stay those of the full tempered softmax."""
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(1, 300, generator=gen).expand(3, -1).contiguous()
    rows = [RowSampling(0.0, -1, 1.0, None), RowSampling(0.7, 1, 1.0, None), RowSampling(1.3, -1, 1.0, None)]
    plan = SamplingPlan(rows, logits.device)
    tokens, logprobs = sample_tokens(logits, plan, gen)
    best = int(logits[0].argmax())
    assert tokens[:2].tolist() == [best, best]
    temps = torch.tensor([1.0, 0.7, 1.3])[:, None]
    expected = torch.log_softmax(logits / temps, -1).gather(1, tokens[:, None]).squeeze(1)
    assert torch.allclose(logprobs, expected, atol=1e-5)
