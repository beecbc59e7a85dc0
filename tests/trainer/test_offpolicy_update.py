"""The decoupled objective in the real updater (tiny model): lag-0 data trains exactly like sync; lags reported."""

from __future__ import annotations

import copy

import pytest
import torch
from trainer_episodes import make_groups
from update_probes import applied_gradients

from agentrl.algos.config import AlgorithmConfig
from agentrl.config.sections import TrainerConfig
from agentrl.trainer.batch import build_rows, split_mini_batches
from agentrl.trainer.logprobs import PolicyLogprobs
from agentrl.trainer.mismatch import write_back
from agentrl.trainer.update import PolicyUpdater, _Totals

REWARDS = [[1.0, 0.0, 0.3, 0.8], [0.2, 0.9, 0.1, 0.4]]


def _updater(lm: torch.nn.Module, algo: AlgorithmConfig) -> PolicyUpdater:
    return PolicyUpdater(
        PolicyLogprobs(lm, chunk_tokens=32),
        algo,
        TrainerConfig(lr=1e-3, mini_batches=2),
        temperature=1.0,
        total_steps=3,
    )


def test_lag_zero_decoupled_update_equals_the_synchronous_update(tiny_lm: torch.nn.Module) -> None:
    groups = make_groups(tiny_lm, REWARDS, turns=2, version=4)
    sync_lm = copy.deepcopy(tiny_lm)
    sync = _updater(sync_lm, AlgorithmConfig()).update(build_rows(groups, 4, AlgorithmConfig(), 4), version=4)
    algo = AlgorithmConfig(proximal="interpolate", is_correction={"kind": "tis", "cap": 1.5})
    dec = _updater(tiny_lm, algo).update(build_rows(groups, 4, algo, 4), version=4)
    assert dec["train/loss"] == sync["train/loss"]
    for (name, a), b in zip(tiny_lm.state_dict().items(), sync_lm.state_dict().values()):
        assert torch.equal(a, b), name
    assert dec["train/token_lag_mean"] == 0.0 and dec["train/token_lag_max"] == 0.0
    assert dec["train/is_truncated_frac_seq"] == 0.0 and dec["train/is_abs_log_ratio_mean"] == 0.0


def test_stale_tokens_report_their_lag_and_keep_the_behaviour_logprobs(tiny_lm: torch.nn.Module) -> None:
    groups = make_groups(tiny_lm, REWARDS, version=1)
    for ep in (e for g in groups for e in g):  # the engine that sampled them was a bit off the trainer
        seg = ep.segments[0]
        seg.logprobs = [lp - 0.05 if m else 0.0 for lp, m in zip(seg.logprobs, seg.loss_mask)]
    algo = AlgorithmConfig(proximal="recompute", is_correction={"kind": "mis", "low": 0.97, "high": 1.03})
    rows = build_rows(groups, 4, algo, 3)
    engine = [list(r.logp_old) for r in rows]
    metrics = _updater(tiny_lm, algo).update(rows, version=3)
    assert metrics["train/token_lag_mean"] == 2.0 and metrics["train/token_lag_max"] == 2.0
    assert [r.logp_behaviour for r in rows] == engine  # b survives the recompute that replaced logp_old
    # every row's mean(p - b) is +0.05 -> ratio 1.051 > 1.03: all masked, so nothing trains
    assert metrics["train/is_masked_frac_seq"] == pytest.approx(1.0)
    assert metrics["train/is_abs_log_ratio_mean"] == pytest.approx(0.05, abs=2e-3)
    assert metrics["mismatch/abs_mean"] == pytest.approx(0.05, abs=2e-3)


def _mixed_lag_rows(lm: torch.nn.Module, algo: AlgorithmConfig) -> list:
    """Group 0 sampled by the current weights (version 3, the trainer's exact logprobs), group 1 two versions
    ago (logprobs 0.05 off), group 2 stale too but with equal rewards (no gradient)."""
    fresh = make_groups(lm, [REWARDS[0]], version=3)
    stale = make_groups(lm, [REWARDS[1], [0.5, 0.5, 0.5, 0.5]], version=1, seed=1)
    for ep in (e for g in stale for e in g):
        seg = ep.segments[0]
        seg.logprobs = [lp - 0.05 if m else 0.0 for lp, m in zip(seg.logprobs, seg.loss_mask)]
    return build_rows([*fresh, *stale], 4, algo, 3)


def test_recompute_stale_forwards_only_stale_trainable_rows_and_updates_as_recompute(
    tiny_lm: torch.nn.Module,
) -> None:
    every_lm = copy.deepcopy(tiny_lm)
    every = AlgorithmConfig(proximal="recompute", is_correction={"kind": "tis", "cap": 2.0})
    stale_only = AlgorithmConfig(proximal="recompute_stale", is_correction={"kind": "tis", "cap": 2.0})
    m_every = _updater(every_lm, every).update(_mixed_lag_rows(every_lm, every), version=3)
    rows = _mixed_lag_rows(tiny_lm, stale_only)
    engine = [list(r.logp_old) for r in rows]
    m_stale = _updater(tiny_lm, stale_only).update(rows, version=3)
    # neither forwards group 2 nor group 1's reward-0.4 row (its advantage is 0); group 0 only recompute does
    assert m_every["train/recomputed_rows"] == 7.0 and m_stale["train/recomputed_rows"] == 3.0
    assert [r.logp_old for r in rows[:4]] == engine[:4]  # fresh rows keep the engine's as proximal
    trained_stale = [i for i in range(4, 8) if rows[i].trainable]
    assert len(trained_stale) == 3 and all(rows[i].logp_old != engine[i] for i in trained_stale)  # recomputed
    assert [r.logp_behaviour for r in rows[:8]] == engine[:8]
    # the engine of the fresh rows matches the trainer, so the two proximal policies give the same update
    assert m_stale["train/loss"] == pytest.approx(m_every["train/loss"], rel=1e-5, abs=1e-7)
    # Adam divides each element's gradient by its own scale, so an element whose gradient is a rounding residue
    # of the two recomputes moves by a sizeable fraction of lr either way; a different update moves many elements
    # by about lr (1e-3) per step. A tenth of lr separates the two.
    for (name, a), b in zip(tiny_lm.state_dict().items(), every_lm.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0.0, atol=1e-4, msg=name)
    assert m_stale["train/is_abs_log_ratio_mean"] == pytest.approx(m_every["train/is_abs_log_ratio_mean"], abs=1e-5)


@pytest.mark.parametrize(
    ("engine_matches_fp32", "precision", "recomputed"),
    [(True, "float32", 3.0), (False, "float32", 7.0), (True, "bfloat16_autocast", 7.0)],
)
def test_recompute_stale_recomputes_fresh_rows_too_when_engine_and_trainer_numerics_differ(
    tiny_lm: torch.nn.Module, engine_matches_fp32: bool, precision: str, recomputed: float
) -> None:
    """A fresh row's engine logprobs are its proximal only when they are the trainer's own numbers: a bf16
    engine, or a trainer under bf16 autocast, starts its ratio off 1 by the mismatch (outside GSPO's band)."""
    algo = AlgorithmConfig(proximal="recompute_stale", is_correction={"kind": "tis", "cap": 2.0})
    updater = PolicyUpdater(
        PolicyLogprobs(tiny_lm, chunk_tokens=32),
        algo,
        TrainerConfig(lr=1e-3, mini_batches=2, precision=precision),  # type: ignore[arg-type]
        temperature=1.0,
        total_steps=3,
        engine_matches_fp32=engine_matches_fp32,
    )
    metrics = updater.update(_mixed_lag_rows(tiny_lm, algo), version=3)
    assert metrics["train/recomputed_rows"] == recomputed  # 3 stale trainable rows; 7 trainable in all


def _one_mini_batch(lm: torch.nn.Module, algo: AlgorithmConfig) -> PolicyUpdater:
    """One optimizer step per update, at a learning rate too small to move the weights between forwards."""
    config = TrainerConfig(lr=1e-9, mini_batches=1)
    return PolicyUpdater(PolicyLogprobs(lm, chunk_tokens=32), algo, config, temperature=1.0, total_steps=3)


def test_mini_batch_zero_takes_its_proximal_from_its_own_forward_with_the_recompute_passs_numbers(
    tiny_lm: torch.nn.Module,
) -> None:
    """Mini-batch 0 trains at the step-start weights, so its forward's detached logprobs are the proximal a no-grad
    recompute pass would give: the fused update applies the gradients of one whose proximal was recomputed apart,
    and only rows of later mini-batches are forwarded twice."""
    apart_lm = copy.deepcopy(tiny_lm)
    algo = AlgorithmConfig(proximal="recompute", is_correction={"kind": "tis", "cap": 2.0})
    fused = _one_mini_batch(tiny_lm, algo)
    rows = _mixed_lag_rows(tiny_lm, algo)
    engine = [list(r.logp_old) for r in rows]
    fused_grads = applied_gradients(fused)
    metrics = fused.update(rows, version=3)
    assert metrics["train/recomputed_rows"] == 7.0 and metrics["train/proximal_forward_rows"] == 0.0
    assert [r.logp_behaviour for r in rows if r.trainable] == [e for e, r in zip(engine, rows) if r.trainable]
    assert metrics["mismatch/abs_max"] > 0.04  # the stale rows' engine logprobs were 0.05 off, measured all the same
    assert metrics["train/mb0_abs_log_s_max"] == 0.0  # the ratio starts at exactly 1
    # the reference: a separate no-grad pass first (what every row of a later mini-batch still gets)
    apart = _one_mini_batch(apart_lm, algo)
    apart_rows = _mixed_lag_rows(apart_lm, algo)
    for row in apart_rows:  # b: the engine's; p: a no-grad pass over the trained rows, before any training forward
        row.logp_behaviour = list(row.logp_old)
    for micro, logp in apart._trainer_logprobs([r for r in apart_rows if r.trainable]):
        write_back(micro, logp)
    apart_grads = applied_gradients(apart)
    apart._mini_batch_step(apart_rows, _Totals(), first=True)
    assert len(fused_grads) == len(apart_grads) == 1
    for a, b in zip(fused_grads[0], apart_grads[0]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_only_later_mini_batches_pay_a_proximal_forward(tiny_lm: torch.nn.Module) -> None:
    algo = AlgorithmConfig(proximal="recompute", is_correction={"kind": "tis", "cap": 2.0})
    rows = _mixed_lag_rows(tiny_lm, algo)
    metrics = _updater(tiny_lm, algo).update(rows, version=3)  # mini_batches=2
    second = split_mini_batches(rows, 2)[1]
    assert metrics["train/recomputed_rows"] == 7.0
    assert metrics["train/proximal_forward_rows"] == float(sum(r.trainable for r in second)) > 0


def test_the_mismatch_measures_the_recomputed_rows_in_every_mini_batch(tiny_lm: torch.nn.Module) -> None:
    """mismatch/* is over the rows whose proximal was recomputed, whether mini-batch 0's training forward measured
    them or a later mini-batch's pass: the fresh rows that share mini-batch 0 (exact engine logprobs, kept) are
    not mixed in. Every recomputed row here is a stale one whose engine logprobs are 0.05 off."""
    algo = AlgorithmConfig(proximal="recompute_stale", is_correction={"kind": "tis", "cap": 2.0})
    fresh = make_groups(tiny_lm, [REWARDS[0]], version=3)
    stale = make_groups(tiny_lm, [REWARDS[1]], version=1, seed=1)
    for ep in (e for g in stale for e in g):
        seg = ep.segments[0]
        seg.logprobs = [lp - 0.05 if m else 0.0 for lp, m in zip(seg.logprobs, seg.loss_mask)]
    rows = build_rows([*stale, *fresh], 4, algo, 3)  # the stale group first: mini-batch 0 holds both kinds
    first = [{v for v, m in zip(r.versions, r.mask) if m} for r in split_mini_batches(rows, 2)[0] if r.trainable]
    assert {3} in first and {1} in first  # a fresh trained row shares mini-batch 0 with a recomputed one
    metrics = _updater(tiny_lm, algo).update(rows, version=3)
    assert metrics["train/recomputed_rows"] == 3.0
    assert metrics["mismatch/abs_mean"] == pytest.approx(0.05, abs=2e-3)
    assert metrics["mismatch/pre_update_abs_log_s_p50"] == pytest.approx(0.05, abs=2e-3)
