"""GSPO / GSPO-token / GRPO losses: golden values, closed-form gradients, and the properties in
docs/algorithm.md#gradients and #edge-cases."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.algos import policy_loss
from agentrl.errors import ConfigError

EPS_LOW, EPS_HIGH = 0.2, 0.3


def _golden_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    logp_old = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1e10]])
    delta = torch.tensor([[0.1, 0.2, 0.3], [-0.5, -0.3, 0.0]])
    logp_new = (logp_old + delta).clone()
    logp_new[1, 2] = -math.inf  # garbage in padding must not matter
    mask = torch.tensor([[True, True, True], [True, True, False]])
    return logp_new.requires_grad_(), logp_old, mask


@pytest.mark.parametrize("variant", ["gspo", "gspo_token"])
def test_golden_sequence_advantages(variant: str) -> None:
    logp_new, logp_old, mask = _golden_inputs()
    out = policy_loss(variant, logp_new, logp_old, mask, torch.tensor([1.0, -1.0]), eps_low=EPS_LOW, eps_high=EPS_HIGH)
    # row 0: log s = 0.2, s = 1.221403 (inside the band); row 1: log s = -0.4, s = 0.670320 < 0.8 with A < 0 -> -0.8
    assert out.loss.item() == pytest.approx(-(math.exp(0.2) - 0.8) / 2, abs=1e-6)
    out.loss.backward()
    expected = torch.tensor([[-math.exp(0.2) / 6] * 3, [0.0, 0.0, 0.0]])
    assert torch.allclose(logp_new.grad, expected, atol=1e-6)
    assert out.metrics["clip_frac_seq"] == pytest.approx(0.5)
    assert out.metrics["abs_log_s_max"] == pytest.approx(0.4, abs=1e-6)


def test_golden_token_advantages_clip_by_sign() -> None:
    logp_old = torch.zeros(1, 4)
    logp_new = torch.full((1, 4), 0.5, requires_grad=True)  # s = e^0.5 = 1.6487 > 1.3
    adv = torch.tensor([[1.0, -1.0, 1.0, -2.0]])
    out = policy_loss(
        "gspo_token", logp_new, logp_old, torch.ones(1, 4, dtype=torch.bool), adv, eps_low=EPS_LOW, eps_high=EPS_HIGH
    )
    s = math.exp(0.5)
    # A > 0 tokens take the clipped 1.3; A < 0 tokens keep s (against the advantage: not clipped)
    assert out.loss.item() == pytest.approx(-(1.3 - s + 1.3 - 2 * s) / 4, abs=1e-6)
    out.loss.backward()
    assert logp_new.grad.tolist()[0] == pytest.approx([0.0, s / 4, 0.0, 2 * s / 4], abs=1e-6)
    assert out.metrics["clip_frac_token"] == pytest.approx(0.5)


def _closed_form(
    variant: str, logp_new: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor, adv_bt: torch.Tensor, n: int
) -> torch.Tensor:
    """docs/algorithm.md#gradients closed forms, written independently of the implementation (float64)."""
    ln, lo, a = logp_new.double(), logp_old.double(), adv_bt.double()
    m = mask.double()
    lengths = m.sum(-1, keepdim=True).clamp(min=1)
    diff = torch.where(mask, ln - lo, torch.zeros_like(ln))
    s = (diff.sum(-1, keepdim=True) / lengths).exp().expand_as(ln)
    ratio = (diff.exp()) if variant == "grpo" else s
    clipped = ((a > 0) & (ratio > 1 + EPS_HIGH)) | ((a < 0) & (ratio < 1 - EPS_LOW))
    return -(1 / n) * m * (~clipped).double() * a * ratio / lengths


def _random_case(seed: int, scale: float = 0.3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    b, t = 6, 9
    logp_old = -torch.rand(b, t, generator=g) * 3
    logp_new = logp_old + (torch.rand(b, t, generator=g) - 0.5) * scale
    mask = torch.rand(b, t, generator=g) > 0.3
    mask[2] = False  # an empty row
    adv = torch.randn(b, t, generator=g)
    return logp_new, logp_old, mask, adv


@pytest.mark.parametrize("variant", ["gspo_token", "grpo"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_autograd_matches_closed_form_token_advantages(variant: str, seed: int) -> None:
    logp_new, logp_old, mask, adv = _random_case(seed)
    leaf = logp_new.clone().requires_grad_()
    policy_loss(variant, leaf, logp_old, mask, adv, eps_low=EPS_LOW, eps_high=EPS_HIGH, num_sequences=8).loss.backward()
    expected = _closed_form(variant, logp_new, logp_old, mask, torch.where(mask, adv, 0.0), 8)
    assert torch.allclose(leaf.grad.double(), expected, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_autograd_matches_closed_form_gspo(seed: int) -> None:
    logp_new, logp_old, mask, _ = _random_case(seed)
    adv_i = torch.randn(6, generator=torch.Generator().manual_seed(seed + 10))
    leaf = logp_new.clone().requires_grad_()
    policy_loss("gspo", leaf, logp_old, mask, adv_i, eps_low=EPS_LOW, eps_high=EPS_HIGH).loss.backward()
    expected = _closed_form("gspo", logp_new, logp_old, mask, adv_i[:, None].expand(6, 9), 6)
    assert torch.allclose(leaf.grad.double(), expected, atol=1e-6)


def _gspo_token_without_detach(
    logp_new: torch.Tensor, logp_old: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor, n: int
) -> torch.Tensor:
    """A deliberately wrong GSPO-token (log s_i not detached), to show the tests catch it."""
    lengths = mask.sum(-1).clamp(min=1)
    log_s = torch.where(mask, logp_new - logp_old, 0.0).sum(-1) / lengths
    s_it = (log_s[:, None] + logp_new - logp_new.detach()).exp()
    surr = torch.minimum(s_it * adv, s_it.clamp(1 - EPS_LOW, 1 + EPS_HIGH) * adv)
    return -(torch.where(mask, surr, 0.0).sum(-1) / lengths).sum() / n


def test_missing_detach_is_caught_by_closed_form() -> None:
    logp_new, logp_old, mask, adv = _random_case(3, scale=0.05)
    expected = _closed_form("gspo_token", logp_new, logp_old, mask, torch.where(mask, adv, 0.0), 6)
    wrong = logp_new.clone().requires_grad_()
    _gspo_token_without_detach(wrong, logp_old, mask, adv, 6).backward()
    assert not torch.allclose(wrong.grad.double(), expected, atol=1e-4)
    right = logp_new.clone().requires_grad_()
    policy_loss("gspo_token", right, logp_old, mask, adv, eps_low=EPS_LOW, eps_high=EPS_HIGH).loss.backward()
    assert torch.allclose(right.grad.double(), expected, atol=1e-6)


def test_finite_difference_of_value_equals_row_sum_expression() -> None:
    logp_new, logp_old, mask, adv = _random_case(4, scale=0.05)
    logp_new, logp_old, adv = logp_new.double(), logp_old.double(), adv.double()
    closed = _closed_form("gspo_token", logp_new, logp_old, mask, torch.where(mask, adv, 0.0), 6)
    lengths = mask.sum(-1, keepdim=True).clamp(min=1).double()
    true_grad = (closed.sum(-1, keepdim=True) / lengths) * mask.double()  # rowsum(dL/dlogp) / |y_i|

    def value(x: torch.Tensor) -> float:
        return float(policy_loss("gspo_token", x, logp_old, mask, adv, eps_low=EPS_LOW, eps_high=EPS_HIGH).loss)

    h = 1e-3
    for i, t in [(0, 0), (1, 3), (3, 5), (5, 8)]:
        if not mask[i, t]:
            continue
        plus, minus = logp_new.clone(), logp_new.clone()
        plus[i, t] += h
        minus[i, t] -= h
        fd = (value(plus) - value(minus)) / (2 * h)
        assert fd == pytest.approx(float(true_grad[i, t]), abs=2e-4)


def test_gspo_token_equals_gspo_for_constant_advantages() -> None:
    logp_new, logp_old, mask, _ = _random_case(5, scale=0.6)
    adv_i = torch.tensor([1.0, -1.0, 0.5, -0.3, 2.0, -2.0])
    results = {}
    for variant, adv in (("gspo", adv_i), ("gspo_token", adv_i[:, None].expand(6, 9))):
        leaf = logp_new.clone().requires_grad_()
        out = policy_loss(variant, leaf, logp_old, mask, adv, eps_low=EPS_LOW, eps_high=EPS_HIGH)
        out.loss.backward()
        results[variant] = (out.loss.item(), leaf.grad, out.metrics["clip_frac_seq"])
    assert results["gspo"][0] == pytest.approx(results["gspo_token"][0], abs=1e-6)
    assert torch.allclose(results["gspo"][1], results["gspo_token"][1], atol=1e-7)
    assert results["gspo"][2] == results["gspo_token"][2]


def test_on_policy_gradient_is_advantage_weighted_mean_logprob() -> None:
    logp, _, mask, _ = _random_case(6)
    adv_i = torch.randn(6, generator=torch.Generator().manual_seed(1))
    leaf = logp.clone().requires_grad_()
    out = policy_loss("gspo", leaf, logp, mask, adv_i, eps_low=3e-4, eps_high=4e-4)
    out.loss.backward()
    ref = logp.clone().requires_grad_()
    lengths = mask.sum(-1).clamp(min=1)
    (-(adv_i * torch.where(mask, ref, 0.0).sum(-1) / lengths).sum() / 6).backward()
    assert torch.allclose(leaf.grad, ref.grad, atol=1e-7)
    nonempty = mask.any(-1)
    assert out.loss.item() == pytest.approx(float(-(adv_i[nonempty]).sum() / 6), abs=1e-6)  # new == old
    assert out.metrics["clip_frac_token"] == 0.0


@pytest.mark.parametrize(
    ("delta", "adv", "grad_zero"),
    [
        (0.5, 1.0, True),
        (0.5, -1.0, False),
        (-0.5, -1.0, True),
        (-0.5, 1.0, False),
    ],
)
def test_clipping_zeroes_gradient_only_in_advantage_direction(delta: float, adv: float, grad_zero: bool) -> None:
    logp_new = torch.full((1, 3), delta, requires_grad=True)
    out = policy_loss(
        "gspo_token",
        logp_new,
        torch.zeros(1, 3),
        torch.ones(1, 3, dtype=torch.bool),
        torch.full((1, 3), adv),
        eps_low=EPS_LOW,
        eps_high=EPS_HIGH,
    )
    out.loss.backward()
    assert bool((logp_new.grad == 0).all()) is grad_zero


def test_loss_is_invariant_to_micro_batch_split() -> None:
    logp_new, logp_old, mask, adv = _random_case(7)
    full_leaf = logp_new.clone().requires_grad_()
    full = policy_loss("gspo_token", full_leaf, logp_old, mask, adv, eps_low=EPS_LOW, eps_high=EPS_HIGH)
    full.loss.backward()
    split_leaf = logp_new.clone().requires_grad_()
    total = torch.zeros(())
    for rows in (slice(0, 1), slice(1, 4), slice(4, 6)):  # unequal micro-batches
        part = policy_loss(
            "gspo_token",
            split_leaf[rows],
            logp_old[rows],
            mask[rows],
            adv[rows],
            eps_low=EPS_LOW,
            eps_high=EPS_HIGH,
            num_sequences=6,
        )
        part.loss.backward()
        total = total + part.loss.detach()
    assert float(total) == pytest.approx(full.loss.item(), abs=1e-6)
    assert torch.allclose(split_leaf.grad, full_leaf.grad, atol=1e-7)


def test_empty_row_counts_in_n_and_contributes_nothing() -> None:
    logp_new = torch.tensor([[-1.0, -1.0], [-5.0, -5.0]], requires_grad=True)
    mask = torch.tensor([[True, True], [False, False]])
    out = policy_loss(
        "gspo", logp_new, logp_new.detach(), mask, torch.tensor([1.0, 7.0]), eps_low=EPS_LOW, eps_high=EPS_HIGH
    )
    assert out.loss.item() == pytest.approx(-0.5)  # -(1 * 1 + 0) / 2
    out.loss.backward()
    assert torch.isfinite(logp_new.grad).all() and bool((logp_new.grad[1] == 0).all())


def test_length_one_gspo_equals_grpo() -> None:
    logp_new = torch.tensor([[-0.7], [-2.0]])
    logp_old = torch.tensor([[-1.0], [-1.5]])
    mask = torch.ones(2, 1, dtype=torch.bool)
    adv = torch.tensor([1.0, -1.0])
    a = policy_loss("gspo", logp_new, logp_old, mask, adv, eps_low=EPS_LOW, eps_high=EPS_HIGH)
    b = policy_loss("grpo", logp_new, logp_old, mask, adv, eps_low=EPS_LOW, eps_high=EPS_HIGH)
    assert a.loss.item() == pytest.approx(b.loss.item(), abs=1e-7)


def test_long_sequences_do_not_underflow() -> None:
    logp_old = torch.full((1, 4000), -2.5)  # sum logp = -10000: exp() would underflow
    logp_new = (logp_old + 1e-4).requires_grad_()
    out = policy_loss(
        "gspo_token",
        logp_new,
        logp_old,
        torch.ones(1, 4000, dtype=torch.bool),
        torch.ones(1),
        eps_low=3e-4,
        eps_high=4e-4,
    )
    assert out.loss.item() == pytest.approx(-math.exp(1e-4), abs=1e-6)
    out.loss.backward()
    assert torch.isfinite(logp_new.grad).all()


def test_bad_inputs_are_config_errors() -> None:
    x = torch.zeros(1, 2)
    m = torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ConfigError, match="Did you mean 'gspo_token'"):
        policy_loss("gspo_tokn", x, x, m, torch.ones(1), eps_low=0.1, eps_high=0.1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="eps_low=1.0 must lie in"):
        policy_loss("gspo", x, x, m, torch.ones(1), eps_low=1.0, eps_high=0.1)
    with pytest.raises(ConfigError, match="use loss 'gspo_token'"):
        policy_loss("gspo", x, x, m, torch.tensor([[1.0, -1.0]]), eps_low=0.1, eps_high=0.1)


def test_log_ratio_clamp_reports_hits() -> None:
    logp_new = torch.full((2, 2), 20.0)
    logp_new[1] = 0.0
    out = policy_loss(
        "gspo",
        logp_new,
        torch.zeros(2, 2),
        torch.ones(2, 2, dtype=torch.bool),
        torch.tensor([-1.0, 1.0]),
        eps_low=EPS_LOW,
        eps_high=EPS_HIGH,
        log_ratio_clamp=10.0,
    )
    assert out.metrics["log_ratio_clamp_frac"] == 0.5
    assert out.loss.item() == pytest.approx((math.exp(10.0) - 1.0) / 2, rel=1e-5)


@pytest.mark.parametrize("variant", ["gspo", "gspo_token"])
def test_log_ratio_clamp_zeroes_the_gradient_beyond_c(variant: str) -> None:
    """A row whose log s exceeds c gets no gradient (a hard dual-clip for A < 0), for both losses.

    The clamp is docs/algorithm.md#the-safety-clamp.
    """
    logp_old = torch.zeros(2, 3)
    logp_new = torch.tensor([[15.0, 15.0, 15.0], [0.1, 0.0, -0.1]], requires_grad=True)  # row 0: log s = 15
    mask = torch.ones(2, 3, dtype=torch.bool)
    out = policy_loss(
        variant, logp_new, logp_old, mask, torch.tensor([-1.0, 1.0]), eps_low=EPS_LOW, eps_high=EPS_HIGH,
        log_ratio_clamp=10.0,
    )  # fmt: skip
    out.loss.backward()
    assert out.metrics["log_ratio_clamp_frac"] == 0.5
    assert torch.equal(logp_new.grad[0], torch.zeros(3))  # unclamped GSPO-token gave ~e^10/6 per token here
    assert logp_new.grad[1].abs().sum() > 0  # the row under the clamp still learns


def test_gspo_and_gspo_token_agree_exactly_when_the_clamp_fires() -> None:
    logp_old = torch.zeros(3, 4)
    base = torch.tensor([[15.0, 14.0, 16.0, 0.0], [0.05, -0.02, 0.01, 0.0], [12.0, 11.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([-1.0, 0.7, 0.4])
    grads, losses = [], []
    for variant in ("gspo", "gspo_token"):
        logp_new = base.clone().requires_grad_()
        out = policy_loss(
            variant, logp_new, logp_old, mask, adv, eps_low=EPS_LOW, eps_high=EPS_HIGH, log_ratio_clamp=10.0
        )
        out.loss.backward()
        grads.append(logp_new.grad)
        losses.append(out.loss.detach())
    assert torch.allclose(losses[0], losses[1], rtol=1e-6)
    assert torch.allclose(grads[0], grads[1], atol=1e-7)
    assert torch.equal(grads[1][0], torch.zeros(4)) and torch.equal(grads[1][2], torch.zeros(4))


@pytest.mark.parametrize("variant", ["gspo_token", "grpo"])
def test_a_constant_token_norm_weighs_every_token_alike(variant: str) -> None:
    """On policy, d loss / d logp_it = -A_i / (N |y_i|) by default and -A_i / (N L) with ``token_norm: L``: a token of
    a long failing row is then pushed down as hard as one of a short failing row (Dr. GRPO's constant normaliser)."""
    from agentrl.algos.loss_base import LossBatch
    from agentrl.algos.losses import make_loss

    mask = torch.tensor([[True] * 2 + [False] * 6, [True] * 8])
    logp = torch.full((2, 8), -1.0)
    advantages = torch.tensor([-1.0, -1.0])
    for token_norm, short, long in ((None, 1 / (2 * 2), 1 / (2 * 8)), (16, 1 / (2 * 16), 1 / (2 * 16))):
        leaf = logp.clone().requires_grad_()
        loss = make_loss(variant, eps_low=EPS_LOW, eps_high=EPS_HIGH, token_norm=token_norm)
        loss(LossBatch(leaf, logp, mask, advantages)).loss.backward()
        assert leaf.grad[0, :2].tolist() == pytest.approx([short] * 2)
        assert leaf.grad[1].tolist() == pytest.approx([long] * 8)
        assert leaf.grad[0, 2:].abs().sum().item() == 0.0


def test_sequence_gspo_refuses_a_token_norm() -> None:
    from agentrl.algos.losses import make_loss

    with pytest.raises(ConfigError, match="gspo has no sum over tokens"):
        make_loss("gspo", token_norm=16)
