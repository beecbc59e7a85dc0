"""The decoupled off-policy objective (docs/algorithm.md#the-decoupled-objective) against a float64 reference on
three-policy vectors.

Behaviour b (engine, per-token versions), proximal p (recompute / behaviour / interpolate) and current c,
with per-turn advantages, padding holding -inf, and corrections none / tis / mis at both levels.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from agentrl.algos import LossBatch, MaskedIS, NoCorrection, OffPolicy, TruncatedIS, make_loss, proximal_logprobs
from agentrl.algos.config import AlgorithmConfig
from agentrl.errors import ConfigError

EPS_LOW, EPS_HIGH = 0.2, 0.3
VERSION = 5  # the trainer's weights at the start of the step
NEG_INF = -math.inf
MASK = [[1, 1, 1, 1, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]
BEHAVIOUR = [
    [-1.0, -2.0, -0.5, -1.5, NEG_INF],
    [-0.7, -1.1, -2.2, NEG_INF, NEG_INF],
    [-0.3, -0.9, -1.7, -0.2, -2.5],
    [NEG_INF] * 5,
]
RECOMPUTE = [  # the step-start trainer forward: close to b, off by the engine-trainer mismatch and older versions
    [-1.02, -1.9, -0.8, -1.1, 0.0],
    [-0.2, -0.6, -1.5, 0.0, 0.0],
    [-0.31, -0.88, -1.69, -0.21, -2.52],
    [0.0] * 5,
]
CURRENT = [
    [-0.95, -1.85, -0.9, -1.0, NEG_INF],
    [-0.1, -0.5, -1.6, NEG_INF, NEG_INF],
    [-0.35, -0.8, -1.75, -0.25, -2.4],
    [NEG_INF] * 5,
]
VERSIONS = [[5, 5, 4, 3, -1], [2, 2, 2, -1, -1], [5, 5, 5, 5, 5], [-1] * 5]
ADVANTAGES = [  # per-turn: row 0 has two turns with different advantages
    [1.0, 1.0, -0.5, -0.5, 0.0],
    [-1.0, -1.0, -1.0, 0.0, 0.0],
    [0.7, 0.7, 0.7, 0.7, 0.7],
    [0.0] * 5,
]
CORRECTIONS = [
    NoCorrection(),
    TruncatedIS(cap=1.2),
    TruncatedIS(cap=1.2, level="token"),
    MaskedIS(low=0.9, high=1.1),
    MaskedIS(low=0.9, high=1.1, level="token"),
]


def _weight(correction: Any, ratio_: float) -> float:
    if correction.kind == "tis":
        return min(ratio_, correction.cap)
    if correction.kind == "mis":
        return ratio_ if correction.low <= ratio_ <= correction.high else 0.0
    return 1.0


def _clip(x: float) -> float:
    return min(max(x, 1 - EPS_LOW), 1 + EPS_HIGH)


def _cut(ratio_: float, adv: float) -> bool:
    return (adv > 0 and ratio_ > 1 + EPS_HIGH) or (adv < 0 and ratio_ < 1 - EPS_LOW)


def reference(variant: str, proximal: str, correction: Any, n: int) -> tuple[float, list[list[float]]]:
    """Loss and d loss / d current, float64, written token by token from
    docs/algorithm.md#the-decoupled-objective (not from the code)."""
    level = correction.level or ("token" if variant == "grpo" else "sequence")
    loss, grad = 0.0, [[0.0] * 5 for _ in MASK]
    for i, row in enumerate(MASK):
        toks = [t for t, m in enumerate(row) if m]
        size = max(len(toks), 1)
        p = {}
        for t in toks:
            b, c, lag = BEHAVIOUR[i][t], CURRENT[i][t], VERSION - VERSIONS[i][t]
            p[t] = {"behaviour": b, "recompute": RECOMPUTE[i][t], "interpolate": b + lag / (lag + 1) * (c - b)}[
                proximal
            ]
        s = math.exp(sum(CURRENT[i][t] - p[t] for t in toks) / size)
        seq_w = _weight(correction, math.exp(sum(p[t] - BEHAVIOUR[i][t] for t in toks) / size))
        for t in toks:
            a = ADVANTAGES[i][t]
            w = seq_w if level == "sequence" else _weight(correction, math.exp(p[t] - BEHAVIOUR[i][t]))
            r = math.exp(CURRENT[i][t] - p[t]) if variant == "grpo" else s
            value = min(r * a, _clip(r) * a)
            if variant == "gspo":  # one surrogate per row, spread as 1/|y| per token for the same sum
                a0 = ADVANTAGES[i][toks[0]]
                value, a = min(s * a0, _clip(s) * a0), a0
            loss -= w * value / size / n
            grad[i][t] = 0.0 if _cut(r, a) else -w * a * r / size / n
    return loss, grad


def _tensors() -> dict[str, torch.Tensor]:
    mask = torch.tensor(MASK, dtype=torch.bool)
    return {
        "current": torch.tensor(CURRENT, requires_grad=True),
        "behaviour": torch.tensor(BEHAVIOUR),
        "recompute": torch.tensor(RECOMPUTE),
        "mask": mask,
        "lags": torch.where(torch.tensor(VERSIONS) >= 0, VERSION - torch.tensor(VERSIONS), 0),
        "adv": torch.tensor(ADVANTAGES),
    }


def _batch(x: dict[str, torch.Tensor], proximal: str, adv: torch.Tensor | None = None) -> LossBatch:
    old = x["recompute"] if proximal == "recompute" else x["behaviour"]
    behaviour = x["behaviour"] if proximal == "recompute" else None
    adv = x["adv"] if adv is None else adv
    return LossBatch(x["current"], old, x["mask"], adv, logp_behaviour=behaviour, lags=x["lags"])


def _sequence_adv() -> torch.Tensor:
    return torch.tensor([1.0, -1.0, 0.7, 0.0])


# gspo has no per-token surrogate, so token-level weights are a config problem for it (tested below)
CASES = [
    (v, c) for v in ("gspo_token", "gspo", "grpo") for c in CORRECTIONS if not (v == "gspo" and c.level == "token")
]


@pytest.mark.parametrize(("variant", "correction"), CASES, ids=[f"{v}-{c.kind}-{c.level}" for v, c in CASES])
@pytest.mark.parametrize("proximal", ["behaviour", "recompute", "interpolate"])
def test_decoupled_loss_matches_float64_reference(variant: str, proximal: str, correction: Any) -> None:
    x = _tensors()
    loss = make_loss(variant, eps_low=EPS_LOW, eps_high=EPS_HIGH)
    adv = _sequence_adv() if variant == "gspo" else None
    n = 6  # N of the mini-batch: more rows than this call holds
    out = loss(_batch(x, proximal, adv), n, OffPolicy(proximal=proximal, is_correction=correction))
    out.loss.backward()
    if variant == "gspo":  # the reference reads a row's advantage from its first token
        global ADVANTAGES
        saved, ADVANTAGES = ADVANTAGES, [[float(a)] * 5 for a in _sequence_adv()]
        try:
            ref_loss, ref_grad = reference(variant, proximal, correction, n)
        finally:
            ADVANTAGES = saved
    else:
        ref_loss, ref_grad = reference(variant, proximal, correction, n)
    assert out.loss.item() == pytest.approx(ref_loss, abs=1e-6)
    assert torch.allclose(x["current"].grad.double(), torch.tensor(ref_grad, dtype=torch.float64), atol=1e-6)
    assert torch.isfinite(out.loss)


def test_corrections_act_and_report_their_fractions() -> None:
    x = _tensors()
    loss = make_loss("gspo_token", eps_low=EPS_LOW, eps_high=EPS_HIGH)
    tis = loss(_batch(x, "recompute"), None, OffPolicy(proximal="recompute", is_correction=TruncatedIS(cap=1.2)))
    # row 1: mean(p - b) = (0.5 + 0.5 + 0.7) / 3 -> ratio 1.76 > 1.2 truncated; rows 0 and 2 stay under the cap
    assert tis.metrics["is_truncated_frac_seq"] == pytest.approx(1 / 3)
    assert tis.metrics["is_truncated_frac_token"] == pytest.approx(3 / 12)
    assert tis.metrics["is_masked_frac_seq"] == 0.0
    mis = loss(_batch(x, "recompute"), None, OffPolicy(proximal="recompute", is_correction=MaskedIS(low=0.9, high=1.1)))
    assert mis.metrics["is_masked_frac_seq"] == pytest.approx(1 / 3)
    token = loss(
        _batch(x, "recompute"),
        None,
        OffPolicy(proximal="recompute", is_correction=MaskedIS(low=0.9, high=1.1, level="token")),
    )
    # tokens with |p - b| > log 1.1 ~ 0.095: row 0 (0.1, 0.3, 0.4), row 1 (all three)
    assert token.metrics["is_masked_frac_token"] == pytest.approx(6 / 12)
    assert token.metrics["is_abs_log_ratio_mean"] == pytest.approx(
        (abs(-0.02 + 0.1 - 0.3 + 0.4) / 4 + 1.7 / 3 + abs(-0.01 + 0.02 + 0.01 - 0.01 - 0.02) / 5) / 3, abs=1e-6
    )


def _sync_and_decoupled(variant: str, off: OffPolicy, lags: torch.Tensor | None = None) -> tuple[Any, ...]:
    x = _tensors()
    if lags is not None:
        x["lags"] = lags
    adv = _sequence_adv() if variant == "gspo" else x["adv"]
    loss = make_loss(variant, eps_low=EPS_LOW, eps_high=EPS_HIGH)
    sync = loss(LossBatch(x["current"], x["behaviour"], x["mask"], adv), 6)
    sync.loss.backward()
    sync_grad = x["current"].grad.clone()
    x["current"].grad = None
    dec = loss(_batch(x, off.proximal, adv), 6, off)
    dec.loss.backward()
    return sync.loss, sync_grad, dec.loss, x["current"].grad


@pytest.mark.parametrize("variant", ["gspo_token", "gspo", "grpo"])
@pytest.mark.parametrize("correction", [NoCorrection(), TruncatedIS(cap=1.2), MaskedIS(low=0.9, high=1.1)])
def test_behaviour_proximal_equals_the_synchronous_loss_exactly(variant: str, correction: Any) -> None:
    # p == b bit for bit, so every ratio is exp(0) = 1 and every weight exactly 1
    sync, sync_grad, dec, dec_grad = _sync_and_decoupled(variant, OffPolicy(is_correction=correction))
    assert torch.equal(sync, dec)
    assert torch.equal(sync_grad, dec_grad)


@pytest.mark.parametrize("variant", ["gspo_token", "gspo", "grpo"])
def test_interpolate_at_lag_zero_equals_the_synchronous_loss_exactly(variant: str) -> None:
    zero = torch.zeros(4, 5, dtype=torch.long)
    off = OffPolicy(proximal="interpolate", is_correction=TruncatedIS(cap=1.2))
    sync, sync_grad, dec, dec_grad = _sync_and_decoupled(variant, off, lags=zero)
    assert torch.equal(sync, dec)
    assert torch.equal(sync_grad, dec_grad)


def test_interpolate_equals_recompute_at_lag_zero_when_engine_and_trainer_share_the_forward() -> None:
    x = _tensors()
    zero = torch.zeros(4, 5, dtype=torch.long)
    shared = x["behaviour"]  # the trainer forward at the step start IS the behaviour policy
    m = x["mask"]  # the loss sanitises padding first; this raw function may leave NaN there
    interp = proximal_logprobs("interpolate", shared, x["current"], zero)
    recomputed = proximal_logprobs("recompute", shared, x["current"], zero, recomputed=shared.clone())
    assert torch.equal(interp[m], recomputed[m])
    # with the real mismatch they differ by exactly the engine-trainer gap, nothing else
    recomputed = proximal_logprobs("recompute", shared, x["current"], zero, recomputed=x["recompute"])
    assert torch.allclose((recomputed - interp)[m], (x["recompute"] - x["behaviour"])[m])


def test_interpolate_lies_between_behaviour_and_current_and_moves_with_lag() -> None:
    b = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])
    c = torch.tensor([[-0.5, -2.5, -0.5, -1.0]])
    previous = b.clone()
    for lag in (1, 2, 5, 50):
        p = proximal_logprobs("interpolate", b, c, torch.full((1, 4), lag))
        assert bool((p >= torch.minimum(b, c)).all() and (p <= torch.maximum(b, c)).all())
        assert torch.allclose(p, b + lag / (lag + 1) * (c - b))
        assert bool(((p - c).abs() <= (previous - c).abs() + 1e-7).all())  # older samples: closer to current
        previous = p
    assert not p.requires_grad


def test_proximal_inputs_are_required() -> None:
    x = _tensors()
    loss = make_loss("gspo_token")
    batch = LossBatch(x["current"], x["recompute"], x["mask"], x["adv"])
    with pytest.raises(ConfigError, match="logp_behaviour"):
        loss(batch, None, OffPolicy(proximal="recompute", is_correction=TruncatedIS()))
    with pytest.raises(ConfigError, match="level 'token'"):
        make_loss("gspo")(
            LossBatch(x["current"], x["behaviour"], x["mask"], _sequence_adv(), lags=x["lags"]),
            None,
            OffPolicy(proximal="interpolate", is_correction=TruncatedIS(level="token")),
        )


def test_algorithm_config_checks_and_defaults() -> None:
    # the defaults are the bundled configs' (configs/quickstart*.yaml): the clip at the step-start policy over stale
    # rows, weighted by the truncated behaviour ratio; a proximal named alone brings no weight it cannot use
    assert AlgorithmConfig().off_policy == OffPolicy(proximal="recompute_stale", is_correction=TruncatedIS(cap=2.0))
    assert AlgorithmConfig(proximal="behaviour").off_policy == OffPolicy()
    assert not AlgorithmConfig(proximal="behaviour").off_policy.decoupled
    assert AlgorithmConfig(old_logprobs="recompute").off_policy == OffPolicy(proximal="recompute")
    cfg = AlgorithmConfig(proximal="interpolate", is_correction={"kind": "mis", "low": 0.8, "high": 1.25})
    assert cfg.off_policy.decoupled and cfg.problems() == []
    keys = [p.key for p in AlgorithmConfig(proximal="behaviour", is_correction="tis").problems()]
    assert keys == ["algorithm.is_correction"]  # a weight of exactly 1: a no-op the user did not mean
    keys = [p.key for p in AlgorithmConfig(old_logprobs="recompute", proximal="interpolate").problems()]
    assert keys == ["algorithm.proximal"]
    bad = AlgorithmConfig(loss="gspo", proximal="recompute", is_correction={"kind": "tis", "level": "token"})
    assert [p.key for p in bad.problems()] == ["algorithm.is_correction.level"]
    with pytest.raises(ValueError, match="cap"):
        AlgorithmConfig(is_correction={"kind": "tis", "cap": 0.5})
