"""Block-by-block attention over packed rows (trainer/block_attention.py) equals the dense masked SDPA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_shared_prefix import grouped_rows

from agentrl.trainer.block_attention import BLOCK_SDPA, AttentionBlocks, RowBlocks, block_sdpa_attention, blocks_of
from agentrl.trainer.logprobs import PolicyLogprobs
from agentrl.trainer.shared_prefix import block_mask, pack_shared_prefix, plan_units

HEADS, KV_HEADS, DIM = 6, 2, 16


class _Attention(torch.nn.Module):
    """What transformers' attention functions read from the module: the GQA group count."""

    num_key_value_groups = HEADS // KV_HEADS


def _units_and_blocks(width: int) -> tuple[torch.Tensor, AttentionBlocks]:
    """Two packed rows of different lengths (one with padding) and a lone row, from real packing."""
    rows = grouped_rows(groups=2, seed=3)
    units = plan_units([r.segments[0] for r in rows], 16, max_len=4096)
    units.append(plan_units([list(range(100, 111))], 16, max_len=4096)[0])  # a lone row: plain causal
    assert {u.prefix_len > 0 for u in units} == {True, False}
    assert width >= max(u.length for u in units) > min(u.length for u in units)
    blocks = blocks_of([u.prefix_len for u in units], [u.starts for u in units], [u.length for u in units])
    return block_mask(units, width), blocks


def _dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    groups = HEADS // KV_HEADS
    out = F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), mask)
    return out.transpose(1, 2)


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 2e-6), (torch.bfloat16, 2e-2)])
def test_blocks_give_the_dense_masked_outputs_and_gradients(dtype: torch.dtype, tol: float) -> None:
    torch.manual_seed(0)
    mask, blocks = _units_and_blocks(width=80)
    f, width = mask.shape[0], mask.shape[-1]
    q = torch.randn(f, HEADS, width, DIM, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(f, KV_HEADS, width, DIM, dtype=dtype, requires_grad=True) for _ in range(2))
    real = torch.zeros(f, width, dtype=torch.bool)  # padding outputs differ (zeros vs self-attention) and are unused
    for i, row in enumerate(blocks.rows):
        real[i, : row.length] = True
    weight = torch.randn(f, width, HEADS, DIM) * real[:, :, None, None]

    def outputs_and_grads(run: object) -> tuple[torch.Tensor, ...]:
        for t in (q, k, v):
            t.grad = None
        out = run()  # type: ignore[operator]
        (out.float() * weight).sum().backward()
        return (out[real].float(), *(t.grad.float().clone() for t in (q, k, v)))  # type: ignore[union-attr]

    dense = outputs_and_grads(lambda: _dense(q, k, v, mask))
    blocked = outputs_and_grads(lambda: block_sdpa_attention(_Attention(), q, k, v, mask, attention_blocks=blocks)[0])
    for name, want, got in zip(("out", "dq", "dk", "dv"), dense, blocked):
        torch.testing.assert_close(got, want, atol=tol, rtol=tol, msg=name)


def test_a_wrong_layout_would_show() -> None:
    """The equality is not vacuous: a layout that lets continuation 2 see continuation 1 changes its outputs."""
    torch.manual_seed(1)
    mask, blocks = _units_and_blocks(width=80)
    first = blocks.rows[0]
    (a_start, _), (_, b_end) = first.spans[0], first.spans[1]
    merged = RowBlocks(first.prefix_len, ((a_start, b_end), *first.spans[2:]))
    wrong = AttentionBlocks((merged, *blocks.rows[1:]))
    q = torch.randn(mask.shape[0], HEADS, 80, DIM)
    k, v = (torch.randn(mask.shape[0], KV_HEADS, 80, DIM) for _ in range(2))
    right_out = block_sdpa_attention(_Attention(), q, k, v, mask, attention_blocks=blocks)[0]
    wrong_out = block_sdpa_attention(_Attention(), q, k, v, mask, attention_blocks=wrong)[0]
    assert (right_out - wrong_out).abs().max() > 1e-2


def test_a_layout_past_the_rows_is_refused() -> None:
    q = torch.randn(1, HEADS, 8, DIM)
    k = v = torch.randn(1, KV_HEADS, 8, DIM)
    with pytest.raises(ValueError, match="past the row width 8"):
        block_sdpa_attention(_Attention(), q, k, v, None, attention_blocks=AttentionBlocks((RowBlocks(4, ((4, 9),)),)))
    with pytest.raises(ValueError, match="without gaps"):  # the row is cut at the spans, so they must tile it
        gap = AttentionBlocks((RowBlocks(2, ((3, 8),)),))
        block_sdpa_attention(_Attention(), q, k, v, None, attention_blocks=gap)
    with pytest.raises(ValueError, match="2 row layouts for a batch of 1"):
        two = AttentionBlocks((RowBlocks(0, ((0, 8),)), RowBlocks(0, ((0, 8),))))
        block_sdpa_attention(_Attention(), q, k, v, None, attention_blocks=two)


def test_the_policy_computes_packed_rows_by_blocks_and_saves_a_plain_config(
    tiny_lm: torch.nn.Module, tmp_path: Path
) -> None:
    """An SDPA model switches to the block implementation for packed rows, gives the dense mask's logprobs,
    runs every other call through SDPA unchanged, and does not write the name into a saved config."""
    tiny_lm.set_attn_implementation("sdpa")
    micro = pack_shared_prefix(grouped_rows(groups=2), 4096, 2048)[0]
    policy = PolicyLogprobs(tiny_lm, chunk_tokens=16)
    args = (micro.input_ids, micro.select, 0.8)
    with torch.no_grad():
        dense = policy(*args, position_ids=micro.position_ids, attention=micro.attention)
        assert tiny_lm.config._attn_implementation == "sdpa"  # no layout: nothing switched
        plain = tiny_lm(input_ids=micro.input_ids[:1, :12]).logits
        blocked = policy(*args, position_ids=micro.position_ids, attention=micro.attention, blocks=micro.blocks)
        assert tiny_lm.config._attn_implementation == BLOCK_SDPA
        torch.testing.assert_close(tiny_lm(input_ids=micro.input_ids[:1, :12]).logits, plain, atol=0, rtol=0)
    selected = micro.select
    torch.testing.assert_close(blocked.logp_bt[selected], dense.logp_bt[selected], atol=2e-5, rtol=1e-5)
    tiny_lm.save_pretrained(tmp_path)
    assert BLOCK_SDPA not in json.dumps(json.loads((tmp_path / "config.json").read_text()))
    tiny_lm.set_attn_implementation("sdpa")
