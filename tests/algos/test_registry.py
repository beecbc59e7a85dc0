"""Losses and advantage schemes are registered plug-ins: names come from the registries, settings and
constraints from the classes, and the trainer aggregates whatever statistics a loss declares."""

from __future__ import annotations

from typing import ClassVar, Literal

import pytest
import torch

from agentrl.algos import (
    LOSSES,
    SCHEMES,
    LossBatch,
    LossTerms,
    Metric,
    PolicyLoss,
    PreparedBatch,
    make_loss,
    maximum,
    ratio,
    register_loss,
    register_scheme,
    summed,
)
from agentrl.algos.advantages import Outcome
from agentrl.algos.config import AlgorithmConfig
from agentrl.errors import ConfigError


class StaleAwareReinforce(PolicyLoss):
    """REINFORCE on the sequence-mean logprob that reads per-token policy versions (a test loss)."""

    kind: Literal["stale_reinforce"] = "stale_reinforce"
    inputs: ClassVar[frozenset[str]] = frozenset({"versions"})
    metrics: ClassVar[dict[str, Metric]] = {"n_tokens": summed(), "row_logp_max": maximum()}

    def terms(self, x: PreparedBatch) -> LossTerms:
        """A_i * mean_t logp_it per row; nothing is clipped."""
        return LossTerms(x.adv_row * x.logp_new.sum(-1) / x.lengths, torch.zeros_like(x.mask))


@pytest.fixture()
def scratch_registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registrations made by a test disappear after it."""
    monkeypatch.setattr(LOSSES, "_classes", dict(LOSSES._classes))
    monkeypatch.setattr(SCHEMES, "_classes", dict(SCHEMES._classes))


def test_bundled_names_come_from_the_registries() -> None:
    assert LOSSES.names() == ["grpo", "gspo", "gspo_token"]
    assert SCHEMES.names() == ["discounted_return", "outcome", "outcome_plus_turn"]
    assert type(AlgorithmConfig().loss).__name__ == "GSPOToken" and AlgorithmConfig().turn_advantage.kind == "outcome"


def test_each_loss_owns_its_settings_and_defaults() -> None:
    assert (make_loss("grpo").eps_low, make_loss("grpo").eps_high) == (0.2, 0.28)  # type: ignore[attr-defined]
    assert (make_loss("gspo").eps_low, make_loss("gspo").eps_high) == (3e-4, 4e-4)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="log_ratio_clamp"):
        make_loss("grpo", log_ratio_clamp=12.0)
    with pytest.raises(ConfigError, match="Did you mean 'grpo'"):
        make_loss("grpoo")


def test_registration_checks_names_inputs_and_metrics(scratch_registries: None) -> None:
    class Clash(StaleAwareReinforce):
        """Another class under a taken name."""

        kind: Literal["gspo"] = "gspo"

    with pytest.raises(ConfigError, match="'gspo' is already registered"):
        register_loss(Clash)

    class WantsProximal(StaleAwareReinforce):
        """Declares an input the batch does not carry."""

        kind: Literal["wants_proximal"] = "wants_proximal"
        inputs: ClassVar[frozenset[str]] = frozenset({"proximal_logp"})

    with pytest.raises(ConfigError, match=r"inputs \['proximal_logp'\], which LossBatch does not carry"):
        register_loss(WantsProximal)

    class BadRatio(StaleAwareReinforce):
        """A ratio over a statistic it does not sum."""

        kind: Literal["bad_ratio"] = "bad_ratio"
        metrics: ClassVar[dict[str, Metric]] = {"frac": ratio("n_old_tokens", "n_tokens")}

    with pytest.raises(ConfigError, match="needs sum statistics"):
        register_loss(BadRatio)
    with pytest.raises(ConfigError, match="subclass AdvantageScheme"):
        register_scheme(StaleAwareReinforce)  # type: ignore[arg-type]
    register_scheme(Outcome)  # registering the same class again is harmless


def test_a_loss_refuses_a_call_without_its_declared_inputs() -> None:
    x = torch.zeros(1, 2)
    loss = StaleAwareReinforce()
    with pytest.raises(ConfigError, match=r"needs the inputs \['versions'\]"):
        loss(LossBatch(x, x, torch.ones(1, 2, dtype=torch.bool), torch.ones(1)))
