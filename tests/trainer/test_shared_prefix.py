"""Rows that share a prompt forward once (trainer/shared_prefix.py): same logprobs, gradients and update."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from agentrl.algos.config import AlgorithmConfig
from agentrl.config.sections import TrainerConfig
from agentrl.errors import ConfigError
from agentrl.models.loading import set_activation_checkpointing
from agentrl.trainer.batch import TrainRow, pack_micro_batches
from agentrl.trainer.logprobs import PolicyLogprobs
from agentrl.trainer.shared_prefix import MIN_SHARED_TOKENS, pack_shared_prefix, plan_units
from agentrl.trainer.update import PolicyUpdater


def _row(ids: list[int], prompt: int, index: int, adv: float, rng: random.Random) -> TrainRow:
    """A row whose completion (after ``prompt`` tokens) is trained, with made-up old logprobs."""
    mask = [t >= prompt - 1 for t in range(len(ids) - 1)]
    logp = [-rng.uniform(0.5, 4.0) if m else 0.0 for m in mask]
    return TrainRow([ids], logp, mask, [0 if m else -1 for m in mask], [adv if m else 0.0 for m in mask], index)


def grouped_rows(groups: int = 3, group_size: int = 4, seed: int = 0) -> list[TrainRow]:
    """Groups sharing a 20-40 token prompt (and a chat-template-like first 6 tokens across groups); in each
    group two completions share their first 3 tokens and two are identical, the edge cases of the layout."""
    rng = random.Random(seed)
    template = [rng.randrange(3, 2000) for _ in range(6)]
    rows = []
    for g in range(groups):
        prompt = template + [rng.randrange(3, 2000) for _ in range(rng.randint(14, 34))]
        completions = [[rng.randrange(3, 2000) for _ in range(rng.randint(4, 15))] for _ in range(group_size)]
        completions[1][:3] = completions[0][:3]
        completions[3] = list(completions[2])
        for i, completion in enumerate(completions):
            rows.append(_row(prompt + completion, len(prompt), g * group_size + i, (-1.0) ** i * (g + 1), rng))
    return rows


def test_plan_packs_each_groups_prompt_once_and_keeps_others_apart() -> None:
    rows = grouped_rows()
    units = plan_units([r.segments[0] for r in rows], MIN_SHARED_TOKENS, max_len=4096)
    assert sorted(m for u in units for m in u.members) == list(range(12))
    assert sorted(sorted(u.members) for u in units) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    for unit in units:
        sequences = [rows[m].segments[0] for m in unit.members]
        assert unit.length == unit.prefix_len + sum(len(s) - unit.prefix_len for s in sequences)
        for j, seq in enumerate(sequences):  # every position's token comes back from the packed row
            end = unit.starts[j] + len(seq) - unit.prefix_len
            assert unit.tokens[: unit.prefix_len] + unit.tokens[unit.starts[j] : end] == seq
    assert sum(u.length for u in units) == sum(len(r.segments[0]) for r in rows) - sum(u.saved for u in units)


def test_plan_respects_the_length_cap_and_leaves_short_and_unshared_rows_alone() -> None:
    rows = grouped_rows(groups=1)
    (whole,) = plan_units([r.segments[0] for r in rows], MIN_SHARED_TOKENS, max_len=4096)
    capped = plan_units([r.segments[0] for r in rows], MIN_SHARED_TOKENS, max_len=whole.length - 1)
    assert len(capped) >= 2 and all(u.length < whole.length for u in capped)
    assert any(u.saved > 0 for u in capped)
    short = plan_units([[5, 6, 7], None, [5, 6, 7]], MIN_SHARED_TOKENS, max_len=4096)
    assert [(u.members, u.prefix_len) for u in short] == [([0], 0), ([1], 0), ([2], 0)]
    other = [list(range(100 + 50 * i, 140 + 50 * i)) for i in range(3)]
    assert all(u.prefix_len == 0 for u in plan_units(other, MIN_SHARED_TOKENS, max_len=4096))


def _logprobs_and_grads(
    lm: torch.nn.Module, rows: list[TrainRow], shared: bool
) -> tuple[list[torch.Tensor], dict[str, torch.Tensor], int]:
    """Per-row loss-layout logprobs of the masked positions, gradients of sum(adv * logp), forward tokens."""
    lm.zero_grad()
    policy = PolicyLogprobs(lm, chunk_tokens=16)
    micros = pack_shared_prefix(rows, 4096, 2048) if shared else pack_micro_batches(rows, 4096)
    by_row: dict[int, torch.Tensor] = {}
    for micro in micros:
        out = policy(micro.input_ids, micro.select, 0.8, position_ids=micro.position_ids, attention=micro.attention)
        logp = micro.loss_layout(out.logp_bt)
        (logp * micro.adv * micro.mask).sum().backward()
        for b, row in enumerate(micro.rows):
            by_row[row.episode_index] = logp[b][micro.mask[b]].detach()
    grads = {n: p.grad.clone() for n, p in lm.named_parameters() if p.grad is not None}
    tokens = sum(int(m.input_ids.numel()) for m in micros)
    return [by_row[r.episode_index] for r in rows], grads, tokens


@pytest.mark.parametrize(("attention", "checkpointing"), [("sdpa", False), ("eager", False), ("sdpa", True)])
def test_packed_rows_give_the_plain_rows_logprobs_and_gradients(
    tiny_lm: torch.nn.Module, attention: str, checkpointing: bool
) -> None:
    tiny_lm.set_attn_implementation(attention)
    set_activation_checkpointing(tiny_lm, checkpointing)
    tiny_lm.train(checkpointing)  # layers recompute only in training mode (the tiny model has no dropout)
    rows = grouped_rows()
    plain_logp, plain_grads, plain_tokens = _logprobs_and_grads(tiny_lm, rows, shared=False)
    shared_logp, shared_grads, shared_tokens = _logprobs_and_grads(tiny_lm, rows, shared=True)
    for plain, shared in zip(plain_logp, shared_logp):
        assert plain.shape == shared.shape and plain.numel() > 0
        torch.testing.assert_close(shared, plain, atol=2e-5, rtol=1e-5)
    assert plain_grads.keys() == shared_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, atol=2e-5, rtol=1e-4, msg=name)
    assert shared_tokens < 0.75 * plain_tokens  # three prompts of 20-40 tokens, forwarded once instead of 4 times


def test_a_wrong_mask_would_show(tiny_lm: torch.nn.Module) -> None:
    """The equality above is not vacuous: letting continuations see their siblings changes the logprobs."""
    rows = grouped_rows(groups=1)
    micro = pack_shared_prefix(rows, 4096, 2048)[0]
    policy = PolicyLogprobs(tiny_lm, chunk_tokens=16)
    with torch.no_grad():
        right = policy(micro.input_ids, micro.select, 1.0, position_ids=micro.position_ids, attention=micro.attention)
        leaky = micro.attention | torch.ones_like(micro.attention).tril()
        wrong = policy(micro.input_ids, micro.select, 1.0, position_ids=micro.position_ids, attention=leaky)
    assert (right.logp_bt - wrong.logp_bt).abs().max() > 1e-3


def _update(lm: torch.nn.Module, rows: list[TrainRow], shared: bool) -> dict[str, float]:
    cfg = TrainerConfig(lr=1e-3, mini_batches=2, micro_batch_tokens=256, pack_shared_prompts=shared)
    algo = AlgorithmConfig(loss={"kind": "gspo_token", "eps_low": 0.2, "eps_high": 0.28})
    updater = PolicyUpdater(PolicyLogprobs(lm, chunk_tokens=32), algo, cfg, temperature=1.0, total_steps=5)
    return updater.update(copy.deepcopy(rows), version=0)


def test_the_update_is_the_same_with_and_without_sharing(tiny_lm: torch.nn.Module) -> None:
    rows = grouped_rows(groups=4)
    twin, initial = copy.deepcopy(tiny_lm), copy.deepcopy(tiny_lm)
    plain = _update(tiny_lm, rows, shared=False)
    shared = _update(twin, rows, shared=True)
    for key in ("train/loss", "train/grad_norm", "train/clip_frac_seq", "train/trained_tokens"):
        assert shared[key] == pytest.approx(plain[key], rel=1e-4, abs=1e-6), key
    for (name, p_plain), p_shared in zip(tiny_lm.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p_shared, p_plain, atol=1e-5, rtol=1e-4, msg=name)
    moved = max(float((p - q).detach().abs().max()) for p, q in zip(tiny_lm.parameters(), initial.parameters()))
    assert moved > 1e-4 and plain["train/optimizer_steps"] == 2.0  # the update did something to compare


def test_an_attention_without_custom_masks_is_refused_with_the_fix(tiny_lm: torch.nn.Module) -> None:
    tiny_lm.config._attn_implementation = "flash_attention_2"
    micro = pack_shared_prefix(grouped_rows(groups=1), 4096, 2048)[0]
    with pytest.raises(ConfigError, match="pack_shared_prompts: false"):
        PolicyLogprobs(tiny_lm)(micro.input_ids, micro.select, 1.0, attention=micro.attention)
