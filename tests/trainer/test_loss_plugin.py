"""A loss registered outside agentrl: the config selects it by name, the trainer fills the inputs it declares
(per-token policy versions) and reports the statistics it declares, without knowing their names."""

from __future__ import annotations

from typing import ClassVar, Literal

import pytest
import torch
from pydantic import Field
from trainer_episodes import make_groups

from agentrl.algos import LOSSES, LossTerms, Metric, PolicyLoss, PreparedBatch, maximum, ratio, register_loss, summed
from agentrl.algos.config import AlgorithmConfig
from agentrl.config.sections import TrainerConfig
from agentrl.trainer.batch import build_rows
from agentrl.trainer.logprobs import PolicyLogprobs
from agentrl.trainer.update import PolicyUpdater


class StaleAwareReinforce(PolicyLoss):
    """REINFORCE on the sequence-mean logprob that also counts tokens sampled by older policies (a test loss)."""

    kind: Literal["stale_reinforce"] = "stale_reinforce"
    current_version: int = Field(1, description="The policy version being trained.")
    inputs: ClassVar[frozenset[str]] = frozenset({"versions"})
    metrics: ClassVar[dict[str, Metric]] = {
        "n_tokens": summed(),
        "n_old_tokens": summed(),
        "old_token_frac": ratio("n_old_tokens", "n_tokens"),
        "row_logp_max": maximum(),
    }

    def terms(self, x: PreparedBatch) -> LossTerms:
        """A_i * mean_t logp_it per row; nothing is clipped."""
        return LossTerms(x.adv_row * x.logp_new.sum(-1) / x.lengths, torch.zeros_like(x.mask))

    def statistics(self, x: PreparedBatch, terms: LossTerms) -> dict[str, float]:
        """Token counts by policy version (the declared ``versions`` input)."""
        versions = x.batch.versions
        assert versions is not None
        old = x.mask & (versions < self.current_version)
        row_logp = (x.logp_new.detach().sum(-1) / x.lengths).max()
        return {"n_tokens": float(x.mask.sum()), "n_old_tokens": float(old.sum()), "row_logp_max": float(row_logp)}


@pytest.fixture()
def scratch_losses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test disappear after it."""
    monkeypatch.setattr(LOSSES, "_classes", dict(LOSSES._classes))


def test_a_registered_loss_is_selected_by_name_and_its_inputs_and_metrics_reach_the_trainer(
    scratch_losses: None, tiny_lm: torch.nn.Module
) -> None:
    register_loss(StaleAwareReinforce)
    algo = AlgorithmConfig(loss={"kind": "stale_reinforce", "current_version": 1})
    assert isinstance(algo.loss, StaleAwareReinforce) and algo.model_dump()["loss"]["current_version"] == 1
    groups = make_groups(tiny_lm, [[1.0, 0.0], [0.0, 1.0]], version=0)
    groups[1][0] = make_groups(tiny_lm, [[0.0]], version=1)[0][0].model_copy(update={"group_id": "g1"})
    rows = build_rows(groups, 2, algo, current_version=1)
    updater = PolicyUpdater(
        PolicyLogprobs(tiny_lm), algo, TrainerConfig(lr=1e-3, mini_batches=2), temperature=1.0, total_steps=1
    )
    metrics = updater.update(rows)
    new_tokens = sum(s.num_sampled for s in groups[1][0].segments)
    all_tokens = sum(s.num_sampled for g in groups for e in g for s in e.segments)
    assert metrics["train/old_token_frac"] == pytest.approx((all_tokens - new_tokens) / all_tokens)
    assert metrics["train/row_logp_max"] < 0.0
    assert "train/clip_frac_seq" not in metrics  # the trainer reports what the loss declares, nothing assumed
