"""agentrl's float32 matmul for few rows (``cpu/csrc/linear_fp32.cpp``, the portable loop's projections): the product
with bias and residual against a float64 reference, at tails of both dimensions; batch invariance (a row's result is
bit for bit the same alone, in any batch and at any thread count); bad inputs refused with the reason.

Needs what the portable loop needs (``tests/engines/test_portable_loop.py``); elsewhere the tests skip naming why.
"""

from __future__ import annotations

import pytest
import torch

from tests.engines.test_portable_loop import _require_portable


def _reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, r: torch.Tensor | None) -> torch.Tensor:
    out = x.double() @ w.double().t()
    out = out if b is None else out + b.double()
    return (out if r is None else out + r.double()).float()


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 8, 13, 24])
@pytest.mark.parametrize(("n", "k"), [(7, 13), (96, 64), (10, 136)])
@pytest.mark.parametrize("extras", ["none", "bias", "residual", "both"])
def test_the_product_matches_a_float64_reference(rows: int, n: int, k: int, extras: str) -> None:
    _require_portable()
    gen = torch.Generator().manual_seed(rows * 1000 + n + k)
    x, w = torch.randn(rows, k, generator=gen), torch.randn(n, k, generator=gen)
    b = torch.randn(n, generator=gen) if extras in ("bias", "both") else None
    r = torch.randn(rows, n, generator=gen) if extras in ("residual", "both") else None
    out = torch.ops.agentrl.linear_fp32(x, w, b, r)
    assert out.shape == (rows, n) and out.dtype == torch.float32
    torch.testing.assert_close(out, _reference(x, w, b, r), rtol=1e-5, atol=1e-5 * k**0.5)


def test_a_rows_result_does_not_depend_on_its_batch_or_the_threads() -> None:
    _require_portable()
    gen = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(24, 136, generator=gen), torch.randn(97, 136, generator=gen), torch.randn(97, generator=gen)
    r = torch.randn(24, 97, generator=gen)
    full = torch.ops.agentrl.linear_fp32(x, w, b, r)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        single = torch.ops.agentrl.linear_fp32(x, w, b, r)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(full, single)
    for start, stop in [(0, 1), (5, 6), (3, 5), (7, 10), (1, 24), (20, 24)]:
        part = torch.ops.agentrl.linear_fp32(x[start:stop], w, b, r[start:stop])
        assert torch.equal(part, full[start:stop]), (start, stop)
    # rows of a strided view (a step's rows are often a view) give the same numbers
    wide = torch.randn(24, 200, generator=gen)
    wide[:, :136] = x
    assert torch.equal(torch.ops.agentrl.linear_fp32(wide[:, :136], w, b, r), full)


def test_bad_inputs_are_refused_with_the_reason() -> None:
    _require_portable()
    x, w = torch.randn(2, 8), torch.randn(4, 8)
    with pytest.raises(RuntimeError, match="float32 x"):
        torch.ops.agentrl.linear_fp32(x.double(), w, None, None)
    with pytest.raises(RuntimeError, match="8 inner elements"):
        torch.ops.agentrl.linear_fp32(x, torch.randn(4, 9), None, None)
    with pytest.raises(RuntimeError, match="contiguous float32 weight"):
        torch.ops.agentrl.linear_fp32(x, torch.randn(8, 4).t(), None, None)
    with pytest.raises(RuntimeError, match="bias"):
        torch.ops.agentrl.linear_fp32(x, w, torch.randn(5), None)
    with pytest.raises(RuntimeError, match="residual"):
        torch.ops.agentrl.linear_fp32(x, w, None, torch.randn(3, 4))
