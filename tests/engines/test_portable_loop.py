"""The portable decode path (``agentrl/engines/embedded/cpu/portable.py``): float32 decode-only steps through the C++
loop give the Python reference loop's logits bit for bit, for each family (qwen2: q/k/v biases; qwen3: per-head q/k
norms), each matmul form (agentrl's float32 matmul, weight-left, ``F.linear``), one row and several, rows of different
lengths (the decode mask), a row joining and one leaving, and after a weight update; the selection by CPU flags under
``AGENTRL_CPU_CAPABILITY``; the build cache keyed by its compile flags.

Needs an x86-64 CPU with AVX2/FMA (or aarch64) and a C++ compiler; elsewhere the loop tests skip naming why (under
CI=true on such a CPU, a failed build fails them).
"""

from __future__ import annotations

import copy
import os

import pytest
import torch

from agentrl.engines.embedded.cpu import build, portable
from agentrl.engines.embedded.cpu.isa import kernel_flags
from agentrl.engines.embedded.cpu.kernels import MatmulForm, PortableKernels, TorchOps
from agentrl.engines.embedded.runner import ModelRunner
from agentrl.engines.embedded.weights import copy_state_dict
from agentrl.errors import EngineConfigError
from tests.engines.test_lean_forward import _model

SHAPE = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=3)


def _require_portable() -> None:
    problem = portable.portable_problem(torch.device("cpu"))
    if problem is None:
        return
    if os.environ.get("CI") == "true" and portable.isa_problem() is None:
        pytest.fail(f"CI=true on a CPU the portable loop is built for, but it does not run: {problem}")
    pytest.skip(f"the portable loop does not run here: {problem}")


def _script(runner: ModelRunner, rows: int) -> list[torch.Tensor]:
    """Logits of a fixed token script: ``rows`` prompts of different lengths prefill and decode, a prompt joins in a
    mixed step (the Python loop), then row 0 leaves."""
    gen = torch.Generator().manual_seed(rows)
    prompts = [torch.randint(0, 300, (n,), generator=gen).tolist() for n in (5, 11, 23, 7, 3)[: rows + 1]]
    token = iter(torch.randint(0, 300, (200,), generator=gen).tolist())
    outs = [runner.prefill(prompts[:rows])]
    for step in range(9):
        last = [next(token) for _ in range(runner.num_rows)]
        if step == 3:
            outs.append(runner.step(last, [(None, prompts[rows])]))
            continue
        if step == 6:
            runner.remove_row(0)
            last = last[1:]
        outs.append(runner.decode(last))
    return outs


def _pair(model: torch.nn.Module, form: MatmulForm) -> dict[bool, ModelRunner]:
    """Two runners over copies of ``model``: decode steps in C++ (True) and in the Python loop (False), each
    counting the steps its C++ loop ran, every step's projections in matmul ``form``."""
    runners = {}
    for native_loop in (True, False):
        runner = ModelRunner(copy.deepcopy(model), max_seq_len=128, native_kernels="on")
        runner.lean.own_matmul_rows = 1000 if form is MatmulForm.AGENTRL else 0
        runner.lean.weight_left_rows = 1000 if form is MatmulForm.WEIGHT_LEFT else 0
        assert isinstance(runner.kernels, PortableKernels) and runner.lean.native_loop
        runner.lean.native_loop = native_loop
        loop, calls = runner.lean.decode_loop, runner.lean.decode_loop.run
        runner.loop_steps = []
        loop.run = lambda *a, calls=calls, steps=runner.loop_steps: steps.append(1) or calls(*a)
        runners[native_loop] = runner
    return runners


@pytest.mark.parametrize("form", list(MatmulForm))
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_the_cpp_loop_gives_the_python_loops_logits_bit_for_bit(kind: str, rows: int, form: MatmulForm) -> None:
    _require_portable()
    runners = _pair(_model(kind, **SHAPE), form)
    assert runners[True].lean.matmul_form(rows) is form
    in_cpp, in_python = _script(runners[True], rows), _script(runners[False], rows)
    assert len(runners[True].loop_steps) == 8 and not runners[False].loop_steps  # every decode-only step in C++
    for a, b in zip(in_cpp, in_python):
        assert torch.equal(a, b), (a - b).abs().max()


def test_the_cpp_loop_follows_a_weight_update() -> None:
    _require_portable()
    model = _model("qwen3", **SHAPE)
    runner = ModelRunner(model, max_seq_len=128, native_kernels="on")
    _script(runner, 2)
    copy_state_dict(model, {name: value + 0.05 for name, value in model.state_dict().items()})
    runner.weights_changed()  # the engine's weight update: the loop's lists are dropped
    runner.clear()
    fresh = ModelRunner(copy.deepcopy(model), max_seq_len=128, native_kernels="on")
    assert all(torch.equal(a, b) for a, b in zip(_script(runner, 2), _script(fresh, 2)))


def test_the_selection_follows_the_capability_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    _require_portable()
    model = _model("llama", **SHAPE)
    assert isinstance(ModelRunner(copy.deepcopy(model), max_seq_len=64).kernels, PortableKernels)  # auto: on
    monkeypatch.setenv("AGENTRL_CPU_CAPABILITY", "avx2")
    assert not any(flag.startswith("avx512") for flag in kernel_flags())
    assert isinstance(ModelRunner(copy.deepcopy(model), max_seq_len=64).kernels, PortableKernels)
    monkeypatch.setenv("AGENTRL_CPU_CAPABILITY", "none")
    runner = ModelRunner(copy.deepcopy(model), max_seq_len=64)
    assert isinstance(runner.kernels, TorchOps) and runner.native_problem == "AGENTRL_CPU_CAPABILITY is none"
    assert not runner.lean.native_loop
    with pytest.raises(EngineConfigError, match="native_kernels is on but AGENTRL_CPU_CAPABILITY is none"):
        ModelRunner(copy.deepcopy(model), max_seq_len=64, native_kernels="on")
    monkeypatch.setenv("AGENTRL_CPU_CAPABILITY", "avx9000")
    with pytest.raises(EngineConfigError, match="'avx9000' is not one of"):
        ModelRunner(copy.deepcopy(model), max_seq_len=64)


def test_the_own_matmul_setting_is_followed_or_refused_with_the_reason() -> None:
    _require_portable()
    model = _model("llama", **SHAPE)
    auto = ModelRunner(copy.deepcopy(model), max_seq_len=64)
    assert auto.lean.matmul_form(1) is MatmulForm.AGENTRL and auto.lean.matmul_form(portable.OWN_MATMUL_ROWS + 1) is (
        MatmulForm.LINEAR
    )
    off = ModelRunner(copy.deepcopy(model), max_seq_len=64, own_matmul_rows=0)
    assert off.lean.matmul_form(1) is MatmulForm.WEIGHT_LEFT and off.lean.matmul_form(9) is MatmulForm.LINEAR
    with pytest.raises(EngineConfigError, match=r"own_matmul_rows is 16 .*\(engine.native_kernels is off\)"):
        ModelRunner(copy.deepcopy(model), max_seq_len=64, own_matmul_rows=16, native_kernels="off")
    with pytest.raises(EngineConfigError, match=r"own_matmul_rows is 16 .*\(the model is not float32\)"):
        ModelRunner(copy.deepcopy(model).to(torch.bfloat16), max_seq_len=64, own_matmul_rows=16)


def test_off_and_other_cpus_fall_back_to_torch_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model("llama", **SHAPE)
    off = ModelRunner(copy.deepcopy(model), max_seq_len=64, native_kernels="off")
    assert isinstance(off.kernels, TorchOps) and off.native_problem == "engine.native_kernels is off"
    monkeypatch.setattr(portable, "machine", lambda: "riscv64")
    other = ModelRunner(copy.deepcopy(model), max_seq_len=64)
    assert isinstance(other.kernels, TorchOps) and "not riscv64" in other.native_problem
    monkeypatch.setattr(portable, "machine", lambda: "x86_64")
    monkeypatch.setattr(portable, "kernel_flags", lambda: {"sse2", "avx"})
    assert "lacks avx2, fma" in ModelRunner(copy.deepcopy(model), max_seq_len=64).native_problem


def test_each_instruction_set_family_is_cached_under_its_own_flags() -> None:
    compiler = build.compiler()
    if compiler is None:
        pytest.skip("no C++ compiler")
    x86, arm = portable.portable_library("x86_64"), portable.portable_library("aarch64")
    assert x86.arch_flags == ("-mavx2", "-mfma") and arm.arch_flags == ("-march=armv8-a",)
    assert build.library_name(x86, compiler) != build.library_name(arm, compiler)
    assert "-mavx2" in build.compile_command(x86, compiler, build.kernel_cache_dir() / "x.so")
