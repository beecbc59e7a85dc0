"""rollout.template_mismatch: new_segment trains: an episode whose chat template strips earlier reasoning
(so its tokens form several segments) stays ONE loss row: s_i and |y_i| over all its assistant tokens,
N = episodes, each segment's logprobs computed in its own context."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_episodes import model_logprobs
from transformers import AutoTokenizer

from agentrl.algos import LossBatch
from agentrl.algos.config import AlgorithmConfig
from agentrl.chat import ChatAssembler
from agentrl.config.sections import TrainerConfig
from agentrl.trainer.batch import TrainRow, build_rows, collate, pack_micro_batches
from agentrl.trainer.logprobs import PolicyLogprobs
from agentrl.trainer.update import PolicyUpdater
from agentrl.trajectory import Episode, TurnRecord
from agentrl.trajectory.ledger import TokenLedger

TEMPLATE = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates" / "think_stripping.jinja"


def _sample(ledger: TokenLedger, lm: torch.nn.Module, text: str, turn: int) -> None:
    """Append ``text`` as the policy's reply with the model's own logprobs in the current segment's context."""
    ids = ledger.assembler.encode(text) + [ledger.assembler.stop_token_ids[0]]
    context = ledger.input_ids()
    logprobs = model_logprobs(lm, context + ids)[len(context) - 1 :]
    ledger.append_sampled(ids, logprobs, [0] * len(ids), turn)
    ledger.end_turn(ledger.decode_turn(ids))


def _episode(assembler: ChatAssembler, lm: torch.nn.Module, group: int, index: int, think: bool) -> Episode:
    episode = Episode(episode_id=f"e{group}-{index}", task_id=f"t{group}", group_id=f"g{group}")
    ledger = TokenLedger(episode, assembler)
    ledger.start([{"role": "system", "content": "You add."}, {"role": "user", "content": f"What is {group} + 3?"}])
    reasoning = f"<think>\nadd {group} and 3, try {index}\n</think>\n\n" if think else ""
    _sample(ledger, lm, f"{reasoning}It is {group + 3 + index}.", 0)
    ledger.append_env([{"role": "user", "content": "Are you sure?"}])  # strips the <think> above: new segment
    _sample(ledger, lm, "Yes." if index == 0 else "No, let me redo it.", 1)
    episode.turns = [TurnRecord(index=k, reward=None) for k in range(2)]
    episode.status, episode.final_reward = "complete", float(index == 0)
    return episode


@pytest.fixture()
def groups(tiny_model_dir: Path, tiny_lm: torch.nn.Module) -> list[list[Episode]]:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = TEMPLATE.read_text()
    assembler = ChatAssembler(tokenizer, template_mismatch="new_segment")
    # three episodes that reasoned (two segments each) and one that did not: 7 segments, 4 episodes
    return [
        [_episode(assembler, tiny_lm, 0, 0, think=True), _episode(assembler, tiny_lm, 0, 1, think=False)],
        [_episode(assembler, tiny_lm, 1, 0, think=True), _episode(assembler, tiny_lm, 1, 1, think=True)],
    ]


def test_an_episode_with_several_segments_is_one_loss_row(groups: list[list[Episode]], tiny_lm: Any) -> None:
    episodes = [e for g in groups for e in g]
    assert [len(e.segments) for e in episodes] == [2, 1, 2, 2]
    rows = build_rows(groups, 2, AlgorithmConfig(), current_version=0)
    assert len(rows) == len(episodes)  # N counts episodes, not segments
    for row, episode in zip(rows, episodes):
        assert sum(row.mask) == sum(s.num_sampled for s in episode.segments)  # |y_i| over all assistant tokens
        assert row.segments == [s.input_ids for s in episode.segments]
    micro = collate(rows)
    assert micro.input_ids.shape[0] == 7 and micro.mask.shape[0] == 4  # forward rows per segment, loss rows per episode
    with torch.no_grad():
        logp = micro.loss_layout(PolicyLogprobs(tiny_lm)(micro.input_ids, micro.select, 1.0).logp_bt)
    for i, episode in enumerate(episodes):
        # each segment in its own context: exactly the engine ("the model's own") logprobs, in order
        expected = [lp for s in episode.segments for lp, m in zip(s.logprobs, s.loss_mask) if m]
        assert logp[i][micro.mask[i]].tolist() == pytest.approx(expected, abs=1e-5)


def test_training_through_a_template_that_strips_reasoning(groups: list[list[Episode]], tiny_lm: Any) -> None:
    algo = AlgorithmConfig()
    before = copy.deepcopy(tiny_lm.state_dict())
    updater = PolicyUpdater(
        PolicyLogprobs(tiny_lm), algo, TrainerConfig(lr=1e-3, mini_batches=2), temperature=1.0, total_steps=1
    )
    metrics = updater.update(build_rows(groups, 2, algo, current_version=0))
    assert metrics["train/rows"] == 4.0 and metrics["train/optimizer_steps"] == 2.0  # 2 mini-batches of 2 episodes
    assert metrics["train/mb0_abs_log_s_max"] < 1e-5  # on-policy: every segment was scored in its own context
    assert metrics["train/trained_tokens"] == sum(s.num_sampled for g in groups for e in g for s in e.segments)
    assert any(not torch.equal(v, before[k]) for k, v in tiny_lm.state_dict().items())


def _gradient(lm: Any, rows: list[TrainRow], budget: int) -> dict[str, torch.Tensor]:
    lm.zero_grad()
    policy, loss = PolicyLogprobs(lm), AlgorithmConfig().loss
    for micro in pack_micro_batches(rows, budget):
        logp = micro.loss_layout(policy(micro.input_ids, micro.select, 1.0).logp_bt)
        loss(LossBatch(logp, micro.logp_old, micro.mask, micro.adv), len(rows)).loss.backward()  # type: ignore[operator]
    return {name: p.grad.clone() for name, p in lm.named_parameters() if p.grad is not None}


def test_the_gradient_does_not_depend_on_how_segments_are_packed(groups: list[list[Episode]], tiny_lm: Any) -> None:
    rows = build_rows(groups, 2, AlgorithmConfig(), current_version=0)
    rows[0].logp_old = [lp - 0.05 if m else 0.0 for lp, m in zip(rows[0].logp_old, rows[0].mask)]  # off-policy row
    together = _gradient(tiny_lm, rows, 100_000)  # one micro-batch of 7 forward rows
    apart = _gradient(tiny_lm, rows, 64)  # about one episode per micro-batch
    assert len(pack_micro_batches(rows, 64)) > 1
    for name, grad in together.items():
        assert torch.allclose(grad, apart[name], atol=1e-6), name
