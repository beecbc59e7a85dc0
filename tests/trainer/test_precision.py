"""trainer.precision: bf16 autocast of the forward/backward with float32 master weights, optimizer, head and loss,
and the engine-trainer mismatch it brings, measured by the audit (algorithm.audit_every)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_episodes import make_groups

from agentrl.algos import LossBatch
from agentrl.algos.config import AlgorithmConfig
from agentrl.config.sections import ModelConfig, TrainerConfig
from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.models.loading import resolve_dtype
from agentrl.models.precision import has_fast_bf16
from agentrl.trainer.batch import build_rows
from agentrl.trainer.logprobs import PolicyLogprobs, _chunk_logprobs
from agentrl.trainer.update import PolicyUpdater, autocast_bf16

# bf16 keeps 8 mantissa bits: on the tiny model a token's logprob moves by ~1e-3 under autocast (measured 1.7e-3
# at most); a forward that silently ran in fp32 moves it by < 1e-5
BF16_MAX_ABS_LOGP = 0.02
FP32_MAX_ABS_LOGP = 1e-5


def _updater(lm: torch.nn.Module, precision: str) -> PolicyUpdater:
    return PolicyUpdater(
        PolicyLogprobs(lm, chunk_tokens=32),
        AlgorithmConfig(audit_every=1, proximal="behaviour"),
        TrainerConfig(lr=1e-3, mini_batches=2, precision=precision),  # type: ignore[arg-type]
        temperature=1.0,
        total_steps=1,
    )


class _RecordingLoss:
    """The configured loss itself, recording the dtypes of its input logprobs and of the loss it returns."""

    def __init__(self, loss: Any) -> None:
        self.loss, self.seen = loss, []

    def __call__(self, batch: LossBatch, *args: Any) -> Any:
        out = self.loss(batch, *args)
        self.seen.append((batch.logp_new.dtype, out.loss.dtype))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loss, name)


def test_precision_resolves_per_device() -> None:
    assert autocast_bf16("auto", "cuda") and not autocast_bf16("auto", "cpu")
    assert autocast_bf16("bfloat16_autocast", "cpu") and not autocast_bf16("float32", "cuda")
    assert TrainerConfig().precision == "auto"  # the CPU default stays float32


def _cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


def test_if_fast_choices_follow_the_cpus_bf16_units() -> None:
    """``*_if_fast``: bf16 exactly where this CPU has AVX512-BF16 or AMX (read from /proc/cpuinfo here, from
    torch's own checks in the code), float32 elsewhere; so one config is fast on both kinds of machine."""
    flags = _cpu_flags()
    if not flags:
        pytest.skip("no /proc/cpuinfo flags to compare with")
    fast = bool({"avx512_bf16", "amx_bf16"} & flags)
    assert has_fast_bf16("cpu") == fast
    assert autocast_bf16("bfloat16_autocast_if_fast", "cpu") == fast
    assert resolve_dtype("bfloat16_if_fast", "cpu") == (torch.bfloat16 if fast else torch.float32)
    engine = EmbeddedEngineConfig()
    assert engine.samples_like_an_fp32_trainer(ModelConfig(path="m", dtype="bfloat16_if_fast")) == (not fast)
    assert engine.samples_like_an_fp32_trainer(ModelConfig(path="m", dtype="float32"))
    assert not engine.samples_like_an_fp32_trainer(ModelConfig(path="m", dtype="bfloat16"))


def test_head_and_log_softmax_stay_fp32_under_autocast() -> None:
    gen = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(24, 64, generator=gen) * 4, torch.randn(500, 64, generator=gen)
    targets = torch.randint(0, 500, (24,), generator=gen)
    ref_logp, ref_ent = _chunk_logprobs(hidden, weight, None, targets, 0.7)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logp, ent = _chunk_logprobs(hidden, weight, None, targets, 0.7)
    assert logp.dtype == torch.float32 and torch.equal(logp, ref_logp) and torch.equal(ent, ref_ent)


@pytest.mark.parametrize("with_bias", [False, True])
def test_head_backward_runs_in_autocasts_dtype(with_bias: bool) -> None:
    """Under bf16 autocast the head's gradients come from bf16 matmuls: within bf16's rounding of float32's
    (and not equal to them, so the bf16 path ran); without autocast they are float32's exactly."""
    gen = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(40, 64, generator=gen), torch.randn(500, 64, generator=gen) / 8
    bias = torch.randn(500, generator=gen) if with_bias else None
    targets = torch.randint(0, 500, (40,), generator=gen)
    upstream = torch.randn(40, generator=gen)

    def grads(autocast: bool) -> list[torch.Tensor]:
        leaves = [t.detach().clone().requires_grad_() for t in (hidden, weight, *([bias] if with_bias else []))]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logp, _ = _chunk_logprobs(*leaves[:2], leaves[2] if with_bias else None, targets, 0.7)
        (logp * upstream).sum().backward()
        return [leaf.grad for leaf in leaves]  # type: ignore[misc]

    exact, bf16 = grads(False), grads(True)
    for want, got in zip(exact, bf16, strict=True):
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=0.02, atol=0.02 * float(want.abs().max()))
    assert not torch.equal(bf16[0], exact[0]) and not torch.equal(bf16[1], exact[1])
    if with_bias:  # the bias gradient is a float32 sum either way
        torch.testing.assert_close(bf16[2], exact[2], rtol=1e-6, atol=1e-6)


def test_bf16_autocast_update_keeps_fp32_master_weights_and_a_fp32_loss(tiny_lm: torch.nn.Module) -> None:
    before = {n: p.detach().clone() for n, p in tiny_lm.named_parameters()}
    updater = _updater(tiny_lm, "bfloat16_autocast")
    spy = _RecordingLoss(updater.loss)
    updater.loss = spy  # type: ignore[assignment]
    rows = build_rows(make_groups(tiny_lm, [[1.0, 0.0], [0.0, 1.0]], turns=2), 2, AlgorithmConfig(), 0)
    metrics = updater.update(rows, audit=True)
    assert spy.seen and all(got == (torch.float32, torch.float32) for got in spy.seen)
    assert all(p.dtype == torch.float32 for p in tiny_lm.parameters())
    states = [s for s in updater.optimizer.state.values() if s]
    assert states and all(s["exp_avg"].dtype == torch.float32 for s in states)
    assert any(not torch.equal(p, before[n]) for n, p in tiny_lm.named_parameters())
    # the episodes' "engine" logprobs are the fp32 model's own: what the audit sees is the autocast's rounding
    assert FP32_MAX_ABS_LOGP < metrics["audit/abs_max"] <= BF16_MAX_ABS_LOGP, metrics["audit/abs_max"]


def test_fp32_precision_has_no_mismatch(tiny_lm: torch.nn.Module) -> None:
    rows = build_rows(make_groups(tiny_lm, [[1.0, 0.0], [0.0, 1.0]], turns=2), 2, AlgorithmConfig(), 0)
    metrics = _updater(tiny_lm, "float32").update(rows, audit=True)
    assert metrics["audit/abs_max"] <= FP32_MAX_ABS_LOGP


def test_a_gpu_that_only_emulates_bf16_is_not_fast_and_the_device_asked_about_is_the_one_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No GPU here: a FAKE two-GPU host (torch.cuda's device queries monkeypatched), GPU 0 a V100 (capability 7.0,
    where torch's is_bf16_supported() says yes because it counts emulation) and GPU 1 an A100 (8.0); the current
    device is 0."""
    capability = {0: (7, 0), 1: (8, 0)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability[index])
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    monkeypatch.setattr(torch.version, "hip", None)
    assert not has_fast_bf16("cuda:0")  # emulated bf16 is slower than float32
    assert not has_fast_bf16("cuda")  # the current device
    assert has_fast_bf16("cuda:1")  # the device asked about, not the current one
