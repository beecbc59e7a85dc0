"""agentrl's own CPU kernels. The decode attention (csrc/decode_attention.cpp) against float32 attention in torch:
grouped query heads of every group size the supported families use, head_dim 64 and 128, rows of different lengths
(one token, odd counts, counts across its 16-token blocks), a cache with more rows than queries, new keys/values
stored first; bad input named; the build cached and a failing compiler named. The matmul (csrc/linear.cpp) against
float32 at row counts around its 12-row groups, strided rows, with a bias. The C++ layer loop
(csrc/decode_layers.cpp): the Python loop's logits, bit for bit, also after a weight update.

Needs a CPU with AVX512-BF16 and a C++ compiler; elsewhere these tests skip naming why (under CI=true on such a CPU,
a failed build fails them).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from agentrl.engines.embedded.cpu import build
from agentrl.engines.embedded.cpu import native as native_kernels
from agentrl.engines.embedded.cpu.native import decode_attention, reference_attention
from agentrl.engines.embedded.runner import ModelRunner
from agentrl.engines.embedded.weights import copy_state_dict
from tests.engines.kernels_here import require_native_kernels, require_sglang_cpu_kernels
from tests.engines.test_lean_forward import _model
from tests.engines.test_sglang_kernels import FITS, _forced


@pytest.fixture(autouse=True)
def _kernels_here() -> None:
    require_sglang_cpu_kernels()  # native_problem() needs them loaded (decode_layers calls them)
    require_native_kernels()


def _bf16(*shape: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(*shape, generator=generator).to(torch.bfloat16)


@pytest.mark.parametrize(
    ("rows", "heads", "kv_heads", "dim", "write_col"),
    [(1, 9, 3, 64, 0), (5, 9, 3, 64, 77), (24, 9, 3, 64, 150), (3, 16, 8, 128, 63), (2, 14, 2, 64, 17),
     (4, 4, 4, 64, 39), (2, 28, 4, 128, 299), (3, 32, 8, 64, 1000)],
)  # fmt: skip
def test_matches_float32_attention_within_bf16_rounding(
    rows: int, heads: int, kv_heads: int, dim: int, write_col: int
) -> None:
    gen = torch.Generator().manual_seed(rows * 1000 + write_col)
    q = _bf16(rows, heads, dim, generator=gen)
    keys = _bf16(rows + 2, kv_heads, write_col + 9, dim, generator=gen)  # spare rows and columns around the windows
    values = _bf16(rows + 2, kv_heads, write_col + 9, dim, generator=gen)
    lengths = torch.randint(1, write_col + 2, (rows,), generator=gen)
    lengths[0] = write_col + 1
    if rows > 2:
        lengths[1:3] = torch.tensor([1, min(17, write_col + 1)])
    new_k, new_v = _bf16(rows, kv_heads, dim, generator=gen), _bf16(rows, kv_heads, dim, generator=gen)
    spare = keys[rows:].clone(), values[rows:].clone()
    got = decode_attention(q, keys, values, lengths, write_col, dim**-0.5, (new_k, new_v))
    assert torch.equal(keys[:rows, :, write_col], new_k) and torch.equal(values[:rows, :, write_col], new_v)
    assert torch.equal(keys[rows:], spare[0]) and torch.equal(values[rows:], spare[1])  # other rows untouched
    want = reference_attention(q, keys, values, lengths, write_col, dim**-0.5)
    rounding = (want.to(torch.bfloat16).float() - want).abs().max().item()
    # measured: the kernel's gap equals the reference's own bf16 rounding (0.002-0.004) at every shape here
    assert (got.float() - want).abs().max().item() <= 2 * rounding + 1e-3


def test_attends_in_place_without_new_keys_and_on_a_strided_query() -> None:
    gen = torch.Generator().manual_seed(3)
    qkv = _bf16(6, 9 + 3 + 3, 64, generator=gen)  # the fused projection's view: query heads first
    keys, values = _bf16(6, 3, 50, 64, generator=gen), _bf16(6, 3, 50, 64, generator=gen)
    lengths = torch.tensor([50, 3, 16, 33, 1, 49])
    q = qkv[:, :9]
    got = decode_attention(q, keys, values, lengths, 49, 0.125)
    assert (got.float() - reference_attention(q, keys, values, lengths, 49, 0.125)).abs().max().item() < 0.02


def test_bad_input_is_named() -> None:
    gen = torch.Generator().manual_seed(4)
    q, keys = _bf16(2, 4, 64, generator=gen), _bf16(2, 2, 10, 64, generator=gen)
    lengths = torch.tensor([5, 5])
    with pytest.raises(RuntimeError, match="bf16"):
        decode_attention(q.float(), keys.float(), keys.float(), lengths, 9, 0.125)
    with pytest.raises(RuntimeError, match="head_dim 32 is not 64 or 128"):
        decode_attention(
            q[..., :32].contiguous(), keys[..., :32].contiguous(), keys[..., :32].contiguous(), lengths, 9, 1.0
        )
    with pytest.raises(RuntimeError, match="row 1 holds 11 tokens ending at column 9"):
        decode_attention(q, keys, keys.clone(), torch.tensor([5, 11]), 9, 0.125)
    with pytest.raises(RuntimeError, match="write_col outside the cache"):
        decode_attention(q, keys, keys.clone(), lengths, 10, 0.125)


def test_the_build_is_cached_and_a_failing_compiler_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTRL_KERNEL_CACHE", str(tmp_path))
    compiler = build.compiler()
    assert compiler is not None
    library = native_kernels.LIBRARY
    built = build.build(library, compiler)
    assert built.parent == tmp_path and built.stat().st_size > 0
    stamp = built.stat().st_mtime_ns
    assert build.build(library, compiler) == built and built.stat().st_mtime_ns == stamp  # not built again
    assert [p.name for p in tmp_path.iterdir()] == [built.name]  # no scratch left behind
    problem = build.build_and_load(library, "/bin/false")
    assert problem is not None and "/bin/false failed" in problem
    monkeypatch.setenv("CXX", "no-such-compiler")
    assert build.compiler() is None
    assert "no C++ compiler (no-such-compiler)" in (build.build_and_load(library, None) or "")


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_the_cpp_layer_loop_gives_the_python_loops_logits_bit_for_bit(kind: str) -> None:
    """Decode-only steps through ``decode_layers`` (qwen2: q/k/v biases; qwen3: per-head q/k norms) against the
    same runner's Python loop, over prefill, multi-row decode, a row joining in a mixed step (the Python loop) and a
    row leaving."""
    model = _model(kind, **{**FITS, "hidden_size": 256, "head_dim": 64}).to(torch.bfloat16)
    loops = []
    runners = {}
    for native_loop in (True, False):
        runner = ModelRunner(copy.deepcopy(model), max_seq_len=256, native_kernels="on")
        assert runner.lean.native_loop
        runner.lean.native_loop = native_loop
        loop = runner.lean.decode_loop
        calls = loop.run
        loop.run = lambda *a, calls=calls, flag=native_loop: loops.append(flag) or calls(*a)
        runners[native_loop] = runner
    in_cpp, in_python = _forced(runners[True]), _forced(runners[False])
    assert loops.count(True) >= 8 and False not in loops  # every decode-only step went through C++
    assert all(torch.equal(a, b) for a, b in zip(in_cpp, in_python))


def test_the_cpp_layer_loop_follows_a_weight_update() -> None:
    model = _model("llama", **{**FITS, "hidden_size": 256, "head_dim": 64}).to(torch.bfloat16)
    runner = ModelRunner(model, max_seq_len=256, native_kernels="on")
    _forced(runner)
    copy_state_dict(model, {name: value + 0.05 for name, value in model.state_dict().items()})
    runner.weights_changed()  # the engine's weight update: packed copies and the loop's lists are dropped
    runner.clear()
    fresh = ModelRunner(copy.deepcopy(model), max_seq_len=256, native_kernels="on")
    assert all(torch.equal(a, b) for a, b in zip(_forced(runner), _forced(fresh)))


@pytest.mark.parametrize("rows", [0, 1, 5, 12, 13, 24, 25, 64])
@pytest.mark.parametrize(("out_features", "in_features"), [(32, 2), (96, 64), (960, 576), (64, 1536)])
def test_the_matmul_matches_float32_within_bf16_rounding(rows: int, out_features: int, in_features: int) -> None:
    gen = torch.Generator().manual_seed(rows + out_features)
    weight, bias = _bf16(out_features, in_features, generator=gen), _bf16(out_features, generator=gen)
    wide = _bf16(rows, in_features + 6, generator=gen)
    x = wide[:, 2 : 2 + in_features]  # rows with a stride: the fused projection's views are such
    got = native_kernels.linear(x, native_kernels.pack_weight(weight), bias)
    want = torch.nn.functional.linear(x.float(), weight.float(), bias.float())
    assert got.shape == (rows, out_features) and got.dtype == torch.bfloat16
    rounding = (want.to(torch.bfloat16).float() - want).abs().max().item() if rows else 0.0
    # measured: within the product's own bf16 rounding (float32 sums in another order)
    assert rows == 0 or (got.float() - want).abs().max().item() <= 2 * rounding + 1e-3


def test_the_matmul_names_bad_shapes() -> None:
    gen = torch.Generator().manual_seed(5)
    with pytest.raises(RuntimeError, match="N a multiple of 32 and K even; got 48 x 64"):
        native_kernels.pack_weight(_bf16(48, 64, generator=gen))
    packed = native_kernels.pack_weight(_bf16(64, 64, generator=gen))
    with pytest.raises(RuntimeError, match="does not match x's 32 inner elements"):
        native_kernels.linear(_bf16(3, 32, generator=gen), packed, None)
    assert native_kernels.shape_problem((48, 64)) is not None and native_kernels.shape_problem((64, 64)) is None
