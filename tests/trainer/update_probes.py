"""What an update did, seen from outside: the gradient each optimizer step applied."""

from __future__ import annotations

import torch

from agentrl.trainer.update import PolicyUpdater


def applied_gradients(updater: PolicyUpdater) -> list[list[torch.Tensor]]:
    """A list that fills with the (clipped) gradient of every parameter at each optimizer step of ``updater``."""
    seen: list[list[torch.Tensor]] = []
    params = list(updater.policy.parameters())
    updater.optimizer.register_step_pre_hook(lambda *_: seen.append([p.grad.clone() for p in params]))
    return seen
