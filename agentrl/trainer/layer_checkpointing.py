"""Which decoder layers recompute their activations, chosen per micro-batch against a token budget.

Checkpointing every layer bounds an update's activation memory but recomputes the whole forward in the
backward pass: on 2 CPU cores that was about a fifth of the main job's update (docs/results/memory-and-speed.md).
Most micro-batches are small enough to keep everything. ``trainer.keep_activations_tokens: N`` keeps the
activations of as many layers as N tokens' worth allows: a micro-batch of T tokens recomputes
``ceil(L * (1 - N / T))`` of its L layers, so the kept activations never exceed what N tokens through every
layer would hold, and a micro-batch of at most N tokens recomputes nothing.

Activations grow linearly in tokens here (the trainer's attention never stores a [L, L] matrix), which is what
makes a token count the right unit. The switch is the ``gradient_checkpointing`` flag transformers puts on each
decoder layer (``GradientCheckpointingLayer``); it is read at each forward, so flipping it between
micro-batches is safe.
"""

from __future__ import annotations

import math

from torch import nn

from agentrl.errors import ConfigError
from agentrl.trainer.distributed import decoder_layers_of


def layers_to_recompute(num_layers: int, tokens: int, keep_tokens: int) -> int:
    """How many of ``num_layers`` layers recompute, so the kept ones hold at most ``keep_tokens`` tokens' worth."""
    if tokens <= keep_tokens:
        return 0
    return min(num_layers, math.ceil(num_layers * (1.0 - keep_tokens / tokens)))


class LayerCheckpointing:
    """Sets, before each micro-batch's forward, which decoder layers recompute their activations.

    Built only for ``keep_tokens`` > 0 (0 is plain activation checkpointing, which needs no choosing). The model
    must already have activation checkpointing enabled (``set_activation_checkpointing``): this only chooses
    among its layers.
    """

    def __init__(self, lm: nn.Module, keep_tokens: int) -> None:
        self.keep_tokens = keep_tokens
        self.layers = list(decoder_layers_of(lm))
        missing = [type(layer).__name__ for layer in self.layers if not hasattr(layer, "gradient_checkpointing")]
        if missing:
            raise ConfigError(
                f"trainer.keep_activations_tokens needs decoder layers that checkpoint one by one, but "
                f"{missing[0]} has no gradient_checkpointing flag (an older transformers?); "
                "set trainer.keep_activations_tokens: 0 or upgrade transformers"
            )

    def before_forward(self, tokens: int) -> int:
        """Choose the layers for a forward of ``tokens`` (padded) tokens; returns how many recompute."""
        count = layers_to_recompute(len(self.layers), tokens, self.keep_tokens)
        for index, layer in enumerate(self.layers):
            layer.gradient_checkpointing = index < count
        return count
