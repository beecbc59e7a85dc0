"""The policy update on the tiny model: alignment, chunked logprobs, packing, N convention, recompute audit."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from trainer_episodes import make_groups
from update_probes import applied_gradients

from agentrl.algos.config import AlgorithmConfig
from agentrl.config.sections import TrainerConfig
from agentrl.errors import ConfigError
from agentrl.trainer.batch import build_rows, pack_micro_batches, segment_row, split_mini_batches
from agentrl.trainer.logprobs import PolicyLogprobs, naive_token_logprobs
from agentrl.trainer.update import PolicyUpdater
from agentrl.trajectory import TokenSegment


def test_segment_row_aligns_completion_to_next_token_positions() -> None:
    seg = TokenSegment(
        prompt_ids=[1, 2, 3],
        completion_ids=[4, 5, 6, 7],
        logprobs=[-0.1, -0.2, 0.0, -0.4],
        loss_mask=[1, 1, 0, 1],
        turn_ids=[0, 0, -1, 1],
        versions=[3, 3, -1, 5],
    )
    row = segment_row(seg, [2.0, -1.0], episode_index=0, current_version=5, max_token_lag=None)
    assert row.segments == [[1, 2, 3, 4, 5, 6, 7]]
    assert row.logp_old == [0.0, 0.0, -0.1, -0.2, 0.0, -0.4]  # position 2 predicts token 4
    assert row.mask == [False, False, True, True, False, True]
    assert row.adv == [0.0, 0.0, 2.0, 2.0, 0.0, -1.0]
    lagged = segment_row(seg, [2.0, -1.0], episode_index=0, current_version=5, max_token_lag=1)
    assert lagged.mask == [False, False, False, False, False, True] and lagged.stale_tokens == 2


def test_chunked_logprobs_match_naive_values_and_gradients(tiny_lm: torch.nn.Module) -> None:
    ids = torch.randint(3, 2000, (3, 40), generator=torch.Generator().manual_seed(0))
    select = torch.rand(3, 39, generator=torch.Generator().manual_seed(1)) > 0.4
    policy = PolicyLogprobs(tiny_lm, chunk_tokens=16)
    out = policy(ids, select, temperature=0.7)
    naive = naive_token_logprobs(tiny_lm, ids, 0.7)
    assert torch.allclose(out.logp_bt[select], naive[select], atol=1e-5)
    assert bool((out.logp_bt[~select] == 0).all())
    out.logp_bt[select].sum().backward()
    grad_chunked = tiny_lm.lm_head.weight.grad.clone()
    tiny_lm.zero_grad()
    naive_token_logprobs(tiny_lm, ids, 0.7)[select].sum().backward()
    assert torch.allclose(grad_chunked, tiny_lm.lm_head.weight.grad, atol=1e-5)
    assert out.entropy_n.shape[0] == int(select.sum()) and bool((out.entropy_n > 0).all())


def test_packing_respects_token_budget(tiny_lm: torch.nn.Module) -> None:
    rows = build_rows(make_groups(tiny_lm, [[1.0, 0.0, 0.5, 0.2]] * 3, turns=3), 4, AlgorithmConfig(), 0)
    micro = pack_micro_batches(rows, token_budget=64)
    assert sorted(id(r) for m in micro for r in m.rows) == sorted(id(r) for r in rows)
    for m in micro:
        assert m.input_ids.numel() <= 64 or len(m.rows) == 1
    padded = sum(m.input_ids.numel() for m in micro)
    assert padded <= 1.35 * sum(r.length for r in rows)


def _updater(lm: torch.nn.Module, lr: float = 1e-3, **trainer_kwargs: object) -> PolicyUpdater:
    cfg = TrainerConfig(lr=lr, mini_batches=2, **trainer_kwargs)  # type: ignore[arg-type]
    return PolicyUpdater(
        PolicyLogprobs(lm, chunk_tokens=32),
        AlgorithmConfig(loss={"kind": "gspo_token", "eps_low": 0.2, "eps_high": 0.28}),
        cfg,
        temperature=1.0,
        total_steps=5,
    )


def test_update_changes_parameters_and_skips_zero_advantage_groups(tiny_lm: torch.nn.Module) -> None:
    before = copy.deepcopy(tiny_lm.state_dict())
    groups = make_groups(tiny_lm, [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [1.0, 1.0]])
    rows = build_rows(groups, 2, AlgorithmConfig(), 0)
    metrics = _updater(tiny_lm).update(rows)
    assert torch.isfinite(torch.tensor(metrics["train/loss"]))
    assert metrics["train/skipped_zero_adv_rows"] == 4.0  # groups 1 and 3 are all-equal
    assert metrics["train/optimizer_steps"] == 2.0
    # on-policy logprobs at mini-batch 0: |log s| is float noise only
    assert metrics["train/mb0_abs_log_s_max"] < 1e-5
    # 4 rows are trained, 2 per mini-batch; mini-batch 0 is on-policy (|log s| < 1e-5, far inside the
    # 3e-4 band), so at most mini-batch 1's 2 rows can be clipped: the fraction is 0, 0.25 or 0.5.
    assert metrics["train/clip_frac_seq"] in (0.0, 0.25, 0.5)
    changed = [k for k, v in tiny_lm.state_dict().items() if not torch.equal(v, before[k])]
    assert changed


def test_mini_batches_share_the_signal_whatever_order_the_groups_come_in(tiny_lm: torch.nn.Module) -> None:
    # both signal groups first: plain halves would put all 4 trainable rows in mini-batch 0 and leave
    # mini-batch 1 without signal, so the update would take one optimizer step instead of two
    groups = make_groups(tiny_lm, [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [1.0, 1.0]])
    rows = build_rows(groups, 2, AlgorithmConfig(), 0)
    minis = split_mini_batches(rows, 2)
    assert [len(m) for m in minis] == [4, 4]
    assert [sum(r.trainable for r in m) for m in minis] == [2, 2]
    assert [[r.episode_index for r in m if r.trainable] for m in minis] == [[0, 1], [2, 3]]  # groups stay whole
    assert sorted(id(r) for m in minis for r in m) == sorted(id(r) for r in rows)
    assert _updater(tiny_lm).update(rows)["train/optimizer_steps"] == 2.0
    with pytest.raises(ConfigError, match="divisible by trainer.mini_batches"):
        split_mini_batches(rows, 3)


def test_a_mini_batch_without_signal_still_steps_the_lr_schedule(tiny_lm: torch.nn.Module) -> None:
    """Issue 31.4: the LR schedule counts mini-batches; one with no trainable row must advance it too."""
    updater = _updater(tiny_lm, lr_schedule="linear")  # 5 steps x 2 mini-batches: the LR reaches 0 after 10
    flat = build_rows(make_groups(tiny_lm, [[0.5, 0.5], [1.0, 1.0]]), 2, AlgorithmConfig(), 0)
    signal = build_rows(make_groups(tiny_lm, [[1.0, 0.0], [0.0, 1.0]]), 2, AlgorithmConfig(), 0)
    lrs = [updater.update(rows)["train/lr"] for rows in (flat, flat, signal, flat, signal)]
    # train/lr: the LR of the update's first optimizer step; updates without signal advance the schedule too
    assert lrs == pytest.approx([1e-3, 8e-4, 6e-4, 4e-4, 2e-4])
    assert updater.scheduler.last_epoch == 10


def test_update_is_invariant_to_micro_batch_budget(tiny_lm: torch.nn.Module) -> None:
    """Gradient accumulation over small micro-batches gives the gradient of one big micro-batch.

    The gradients are compared, not the weights after AdamW: Adam's step is about ``lr * sign(g)`` for every
    element, so float noise in a gradient element near 0 flips its sign and moves that weight by ``2 lr``
    (CI on another CPU saw exactly that). A learning rate of 1e-9 keeps the second mini-batch's weights equal
    to float precision on both sides, so its gradients are comparable too.
    """
    groups = make_groups(tiny_lm, [[1.0, 0.0, 0.3, 0.8], [0.2, 0.9, 0.1, 0.4]], turns=3)
    lm_small = copy.deepcopy(tiny_lm)
    big_updater = _updater(tiny_lm, lr=1e-9, micro_batch_tokens=100_000)
    small_updater = _updater(lm_small, lr=1e-9, micro_batch_tokens=64)
    big_grads, small_grads = applied_gradients(big_updater), applied_gradients(small_updater)
    rows = build_rows(groups, 4, AlgorithmConfig(), 0)
    assert len(small_updater._micro_batches([r for r in rows if r.trainable])) > 1  # it does accumulate
    big = big_updater.update(rows)
    small = small_updater.update(build_rows(groups, 4, AlgorithmConfig(), 0))
    assert big["train/loss"] == pytest.approx(small["train/loss"], abs=1e-6)
    assert big["train/optimizer_steps"] == small["train/optimizer_steps"] == len(big_grads) == len(small_grads) == 2
    names = [name for name, _ in tiny_lm.named_parameters()]
    for step, (a_grads, b_grads) in enumerate(zip(big_grads, small_grads)):
        scale = max(g.abs().max().item() for g in a_grads)
        assert scale > 0
        for name, a, b in zip(names, a_grads, b_grads):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5 * scale), (step, name, (a - b).abs().max().item())


def test_recompute_reports_engine_trainer_mismatch(tiny_lm: torch.nn.Module) -> None:
    groups = make_groups(tiny_lm, [[1.0, 0.0], [0.0, 1.0]])
    shift = 0.01
    for ep in (e for g in groups for e in g):
        seg = ep.segments[0]
        seg.logprobs = [lp - shift if m else 0.0 for lp, m in zip(seg.logprobs, seg.loss_mask)]  # engine off by 0.01
    updater = PolicyUpdater(
        PolicyLogprobs(tiny_lm),
        AlgorithmConfig(old_logprobs="recompute"),
        TrainerConfig(lr=1e-3, mini_batches=1),
        temperature=1.0,
        total_steps=1,
    )
    metrics = updater.update(build_rows(groups, 2, AlgorithmConfig(), 0))
    assert metrics["mismatch/abs_mean"] == pytest.approx(shift, abs=1e-4)
    assert metrics["mismatch/turn0/abs_max"] == pytest.approx(shift, abs=1e-4)
    assert metrics["mismatch/kl_k3"] == pytest.approx(shift**2 / 2, rel=0.05)
    assert metrics["mismatch/pre_update_abs_log_s_p50"] == pytest.approx(shift, abs=1e-4)
    assert metrics["mismatch/pre_update_clip_frac_seq"] == pytest.approx(0.5)  # log s = +0.01 clips the A > 0 rows
    assert metrics["train/mb0_abs_log_s_max"] < 1e-5  # after recompute the first mini-batch is on-policy


def test_per_turn_advantages_reach_the_tokens_of_their_turn(tiny_lm: torch.nn.Module) -> None:
    """discounted_return: a reward on turn 0 credits turn 0's tokens only, by group.

    The scheme is docs/algorithm.md#per-turn-schemes.
    """
    [group] = make_groups(tiny_lm, [[0.0, 0.0]], turns=2)
    for episode, turn_rewards in zip(group, ([1.0, 0.0], [0.0, 0.0])):
        for turn, reward in zip(episode.turns, turn_rewards):
            turn.reward = reward
    algo = AlgorithmConfig(turn_advantage={"kind": "discounted_return", "gamma": 1.0})
    rows = build_rows([group], 2, algo, current_version=0)
    expected_turn0 = 0.5 / (2**0.5 / 2 + algo.adv_eps)  # (1 - 0.5) / (Bessel std of [1, 0] + eps)
    for row, sign in zip(rows, (1.0, -1.0)):
        for adv, turn, masked in zip(row.adv, row.turn_ids, row.mask):
            if not masked:
                assert adv == 0.0
            elif turn == 0:
                assert adv == pytest.approx(sign * expected_turn0, rel=1e-6)
            else:
                assert adv == 0.0  # turn 1: equal returns across the group
        assert any(t == 0 for t in row.turn_ids) and any(t == 1 for t in row.turn_ids)


def _turn_advantages(rows: list[Any]) -> list[list[float]]:
    """Each row's advantage per turn (every token of a turn carries its turn's advantage)."""
    out = []
    for row in rows:
        by_turn = {t: a for t, a, m in zip(row.turn_ids, row.adv, row.mask) if m}
        out.append([by_turn[k] for k in sorted(by_turn)])
    return out


def test_returns_to_go_count_each_turn_reward_once(tiny_lm: torch.nn.Module) -> None:
    """Issue 12: the runner's R_i = sum of turn rewards must not be added to the last turn again."""
    [group] = make_groups(tiny_lm, [[0.0, 0.0, 0.0]], turns=2)
    for episode, turn_rewards in zip(group, ([1.0, 0.0], [0.0, 0.0], [0.0, 0.0])):
        for turn, reward in zip(episode.turns, turn_rewards):
            turn.reward = reward
        episode.final_reward = sum(turn_rewards)  # what the runner records when the env sets no outcome
    algo = AlgorithmConfig(turn_advantage={"kind": "discounted_return", "gamma": 1.0})
    adv = _turn_advantages(build_rows([group], 3, algo, current_version=0))
    assert [a[1] for a in adv] == [0.0, 0.0, 0.0]  # every turn-1 return-to-go is 0 (was [1.15, -0.58, -0.58])
    assert [a[0] for a in adv] == pytest.approx([1.1547, -0.5774, -0.5774], abs=1e-4)
    # an env outcome (info["outcome"]) is separate from the turn rewards: it is the last turn's credit too
    group[0].outcome = group[0].final_reward = 1.0
    adv = _turn_advantages(build_rows([group], 3, algo, current_version=0))
    assert [a[1] for a in adv] == pytest.approx([1.1547, -0.5774, -0.5774], abs=1e-4)


def test_adv_scale_none_is_applied_by_the_outcome_scheme(tiny_lm: torch.nn.Module) -> None:
    groups = make_groups(tiny_lm, [[1.0, 0.0, 1.0, 1.0]], turns=2)
    rows = build_rows(groups, 4, AlgorithmConfig(adv_scale="none"), current_version=0)
    assert _turn_advantages(rows) == [[0.25, 0.25], [-0.75, -0.75], [0.25, 0.25], [0.25, 0.25]]  # Dr-GRPO
