"""bf16 weights packed for oneDNN: the lean forward's logits equal the unpacked ones bit for bit, before and after
in-place weight updates, and packing is refused with the reason where it cannot run."""

from __future__ import annotations

import copy

import pytest
import torch

from agentrl.engines.embedded.cpu.packed_weights import packing_problem
from agentrl.engines.embedded.runner import ModelRunner
from agentrl.engines.embedded.weights import copy_state_dict
from agentrl.errors import EngineConfigError
from tests.engines.test_lean_forward import _model, _run

CPU = torch.device("cpu")
PROBLEM = packing_problem(torch.bfloat16, CPU)
needs_packing = pytest.mark.skipif(PROBLEM is not None, reason=f"no packed bf16 linears here: {PROBLEM}")


def _bf16(kind: str) -> torch.nn.Module:
    return _model(kind).to(torch.bfloat16)


def _runner(model: torch.nn.Module, pack: bool) -> ModelRunner:
    runner = ModelRunner(model, max_seq_len=256, pack_weights=pack, cpu_kernels="torch")
    assert runner.lean is not None and runner.lean.pack_weights is pack
    return runner


@needs_packing
@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_packed_logits_equal_unpacked_bit_for_bit(kind: str) -> None:
    model = _bf16(kind)  # qwen2 has q/k/v biases, qwen3 per-head norms; both residual forms run
    packed, plain = _run(_runner(model, True)), _run(_runner(model, False))
    assert all(torch.equal(a, b) for a, b in zip(packed, plain))


@needs_packing
def test_packs_follow_in_place_updates_and_are_dropped_on_weight_changes() -> None:
    model = _bf16("qwen3")
    runner = _runner(model, True)
    _run(runner, steps=2)
    lean = runner.lean
    assert lean is not None and all(p._packed is not None for p in lean._packed_weights())
    new = {name: value + 0.05 for name, value in model.state_dict().items()}
    copy_state_dict(model, new)  # in place, not through the engine: the parameters' versions move
    reference = copy.deepcopy(model)
    runner.clear()
    after, expected = _run(runner), _run(_runner(reference, False))
    assert all(torch.equal(a, b) for a, b in zip(after, expected))
    runner.weights_changed()  # what the scheduler does after every update
    assert all(p._packed is None for p in lean._packed_weights())
    runner.clear()
    _run(runner, steps=1)
    assert all(p._packed is not None for p in lean._packed_weights())
    runner.free()  # the engine's memory release before the update frees the packed copies too
    assert all(p._packed is None for p in lean._packed_weights())


def test_auto_packs_only_bf16_and_a_required_pack_names_why_it_cannot() -> None:
    model = _model("llama")  # float32
    runner = ModelRunner(model, max_seq_len=64)
    assert runner.lean is not None and not runner.lean.pack_weights
    assert runner.pack_problem == "packing is for bfloat16 weights, the model is torch.float32"
    with pytest.raises(EngineConfigError, match="packing is for bfloat16 weights.*engine.pack_weights to null"):
        ModelRunner(model, max_seq_len=64, pack_weights=True)
    if PROBLEM is None:
        assert ModelRunner(_bf16("llama"), max_seq_len=64).lean.pack_weights  # auto: on for bf16 on this CPU
