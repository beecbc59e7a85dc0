"""Budgeted activation checkpointing: which layers recompute, and that the update's gradients do not change."""

from __future__ import annotations

import copy

import pytest
import torch
from trainer_episodes import make_groups
from update_probes import applied_gradients

from agentrl.algos.config import AlgorithmConfig
from agentrl.config.sections import TrainerConfig
from agentrl.errors import ConfigError
from agentrl.job.loader import load_config
from agentrl.models.loading import set_activation_checkpointing
from agentrl.trainer.batch import build_rows
from agentrl.trainer.distributed import decoder_layers_of
from agentrl.trainer.layer_checkpointing import LayerCheckpointing, layers_to_recompute
from agentrl.trainer.logprobs import PolicyLogprobs
from agentrl.trainer.update import PolicyUpdater


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [(100, 0), (1536, 0), (1537, 1), (2048, 8), (3072, 15), (3636, 18), (10**6, 30)],
)
def test_layers_to_recompute_keeps_at_most_the_budget(tokens: int, expected: int) -> None:
    count = layers_to_recompute(30, tokens, keep_tokens=1536)
    assert count == expected
    assert (30 - count) * tokens <= 30 * 1536  # what the kept layers hold, in token-layers
    assert count == 0 or (30 - count + 1) * tokens > 30 * 1536  # and no layer more recomputes than needed


def test_flags_follow_each_micro_batch(tiny_lm: torch.nn.Module) -> None:
    set_activation_checkpointing(tiny_lm, True)
    layers = list(decoder_layers_of(tiny_lm))
    chooser = LayerCheckpointing(tiny_lm, keep_tokens=64)
    assert chooser.before_forward(256) == len(layers)  # 64/256 of one layer: every layer recomputes
    assert all(layer.gradient_checkpointing for layer in layers)
    assert chooser.before_forward(64) == 0
    assert not any(layer.gradient_checkpointing for layer in layers)
    count = chooser.before_forward(100)
    assert [layer.gradient_checkpointing for layer in layers] == [i < count for i in range(len(layers))]


def _updater(lm: torch.nn.Module, **trainer: object) -> PolicyUpdater:
    return PolicyUpdater(
        PolicyLogprobs(lm, chunk_tokens=32),
        AlgorithmConfig(loss={"kind": "gspo_token"}),
        TrainerConfig(lr=1e-3, mini_batches=1, **trainer),  # type: ignore[arg-type]
        temperature=1.0,
        total_steps=2,
    )


def _count_calls(module: torch.nn.Module) -> list[int]:
    """A one-item list counting ``module``'s forwards, the backward's recompute included (hooks miss those)."""
    calls, forward = [0], module.forward

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return forward(*args, **kwargs)

    module.forward = counted  # type: ignore[method-assign]
    return calls


@pytest.mark.parametrize("keep_tokens", [16, 10**6])
def test_budget_leaves_gradients_as_full_checkpointing(tiny_lm: torch.nn.Module, keep_tokens: int) -> None:
    """Above the budget some layers recompute, below it none: the applied gradients are the same either way."""
    twin = copy.deepcopy(tiny_lm)
    rows = build_rows(make_groups(tiny_lm, [[1.0, 0.0, 0.5, 0.2]] * 2, turns=2), 4, AlgorithmConfig(), 0)
    grads, metrics, forwards = [], [], []
    for lm, keep in ((tiny_lm, 0), (twin, keep_tokens)):
        set_activation_checkpointing(lm, True)
        lm.train()
        calls = _count_calls(decoder_layers_of(lm)[0].mlp)
        updater = _updater(lm, gradient_checkpointing=True, keep_activations_tokens=keep)
        grads.append(applied_gradients(updater))
        metrics.append(updater.update(rows))
        forwards.append(calls[0])
    assert "train/recomputed_layers" not in metrics[0]
    layers = len(decoder_layers_of(tiny_lm))
    assert metrics[1]["train/recomputed_layers"] == (layers if keep_tokens == 16 else 0)
    # a recomputing layer runs its forward again in the backward pass; a kept one runs it once
    assert forwards[1] == (forwards[0] if keep_tokens == 16 else forwards[0] // 2)
    for full, kept in zip(grads[0][0], grads[1][0], strict=True):
        torch.testing.assert_close(kept, full, rtol=1e-5, atol=1e-7)


def test_budget_without_checkpointing_is_refused() -> None:
    with pytest.raises(ConfigError, match="keep_activations_tokens.*gradient_checkpointing is off"):
        load_config(
            "configs/quickstart.yaml",
            ["trainer.gradient_checkpointing=false", "trainer.keep_activations_tokens=1024"],
            check_env=False,
        )
