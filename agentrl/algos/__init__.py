"""Advantage schemes and policy losses (GSPO.md section 4): small pure functions over padded tensors."""

from agentrl.algos.advantages import (
    TURN_ADVANTAGE_SCHEMES,
    broadcast_turn_advantages,
    group_advantages,
    turn_advantages,
)
from agentrl.algos.losses import POLICY_LOSSES, PolicyLossOutput, check_loss_settings, policy_loss

__all__ = [
    "POLICY_LOSSES",
    "TURN_ADVANTAGE_SCHEMES",
    "PolicyLossOutput",
    "broadcast_turn_advantages",
    "check_loss_settings",
    "group_advantages",
    "policy_loss",
    "turn_advantages",
]
