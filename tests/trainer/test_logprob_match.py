"""GSPO with the engine's logprobs as the old policy warns before the run where they are not the update's: on a
GPU with the defaults (``auto``: a bf16 engine and a bf16-autocast update), or with a bf16 server.

No GPU here: the CUDA host is a FAKE (``torch.cuda.is_available`` monkeypatched), enough for the precision
settings to resolve as they do on one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from agentrl.job.loader import load_config
from agentrl.trainer.logprob_match import behaviour_mismatch

TINY = Path(__file__).resolve().parents[2] / "configs" / "tiny_debug.yaml"


def _warning(*overrides: str) -> str | None:
    cfg = load_config(TINY, ["algorithm.old_logprobs=engine", *overrides])
    return behaviour_mismatch(cfg, asyncio.run(cfg.engine.served_dtype(cfg.model)))


def test_the_gpu_defaults_warn_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    # the default proximal (recompute_stale) recomputes every row of a bf16 engine: nothing trains on its logprobs
    assert _warning("model.device=auto", "model.dtype=auto", "trainer.precision=auto") is None
    gpu = ("model.device=auto", "model.dtype=auto", "trainer.precision=auto", "algorithm.proximal=behaviour")
    line = _warning(*gpu)
    assert line is not None and line.startswith("warning:")
    assert "engine bfloat16" in line and "bf16 autocast" in line and "algorithm.proximal: recompute" in line
    assert (
        _warning("model.device=auto", "model.dtype=auto", "trainer.precision=auto", "algorithm.proximal=recompute")
        is None
    )


def test_float32_on_both_sides_is_exact_and_a_bf16_side_is_not() -> None:
    assert _warning("model.device=cpu", "model.dtype=float32", "trainer.precision=float32") is None
    behaviour = "algorithm.proximal=behaviour"  # the clip at the engine's logprobs (the default recomputes)
    bf16_update = _warning("model.device=cpu", "model.dtype=float32", "trainer.precision=bfloat16_autocast", behaviour)
    assert bf16_update is not None and "engine float32" in bf16_update and "bf16 autocast" in bf16_update
    cfg = load_config(
        TINY, ["algorithm.old_logprobs=engine", "model.device=cpu", "trainer.precision=float32", behaviour]
    )
    assert behaviour_mismatch(cfg, "bfloat16") is not None  # a server that reports bf16
    assert "does not report" in (behaviour_mismatch(cfg, None) or "")  # a server that does not say
