"""Advantage schemes and policy losses: registered plug-ins plus small pure functions (docs/algorithm.md).

A loss is a ``PolicyLoss`` and a scheme an ``AdvantageScheme``: one class each (its settings are its
fields), registered by one line below or, for your own, with ``register_loss`` / ``register_scheme``
in your module (named in ``algorithm.import_modules``). See docs/extending.md.
"""

from agentrl.algos.advantages import (
    DiscountedReturn,
    Outcome,
    OutcomePlusTurn,
    TurnCreditWarning,
    broadcast_turn_advantages,
    make_scheme,
    turn_advantages,
)
from agentrl.algos.loss_base import (
    LOSSES,
    LossBatch,
    LossTerms,
    Metric,
    PolicyLoss,
    PolicyLossOutput,
    PreparedBatch,
    maximum,
    ratio,
    register_loss,
    summed,
)
from agentrl.algos.losses import GRPO, GSPO, GSPOToken, make_loss, policy_loss
from agentrl.algos.offpolicy import (
    MaskedIS,
    NoCorrection,
    OffPolicy,
    TruncatedIS,
    behaviour_weights,
    proximal_logprobs,
)
from agentrl.algos.scheme_base import (
    SCHEMES,
    AdvantageScheme,
    Normalization,
    RewardBatch,
    group_advantages,
    register_scheme,
)

register_loss(GSPOToken)
register_loss(GSPO)
register_loss(GRPO)
register_scheme(Outcome)
register_scheme(OutcomePlusTurn)
register_scheme(DiscountedReturn)

__all__ = [
    "LOSSES",
    "SCHEMES",
    "TruncatedIS",
    "TurnCreditWarning",
    "AdvantageScheme",
    "LossBatch",
    "LossTerms",
    "MaskedIS",
    "Metric",
    "NoCorrection",
    "Normalization",
    "OffPolicy",
    "PolicyLoss",
    "PolicyLossOutput",
    "PreparedBatch",
    "RewardBatch",
    "behaviour_weights",
    "broadcast_turn_advantages",
    "group_advantages",
    "make_loss",
    "make_scheme",
    "maximum",
    "policy_loss",
    "proximal_logprobs",
    "ratio",
    "register_loss",
    "register_scheme",
    "summed",
    "turn_advantages",
]
