"""Attention over packed shared-prefix rows that computes only the blocks the mask allows.

A packed row (``shared_prefix.py``) holds a prefix once and then each member's continuation; its block
mask lets a continuation see the prefix and itself. Run densely, attention costs the packed length
squared although most of that square is masked: with a 400-token prefix and four 250-token continuations
about 31 % of it is allowed. Here the prefix attends causally to itself, and each continuation attends to
[prefix, itself] with a lower-right causal mask, one SDPA call each, so the work is the allowed blocks.
On that layout, forward+backward of one layer's attention took half the dense masked SDPA's time in fp32
and bf16 on 2 CPU threads; ``bench/bench_memory.py --options
checkpointing_shared,checkpointing_shared_mask`` compares whole updates (docs/results/memory-and-speed.md).

It is registered with transformers' ``AttentionInterface`` as ``agentrl_block_sdpa`` and falls back to
transformers' own SDPA when a call carries no ``attention_blocks``, so switching a model to it changes
nothing but packed-row forwards. The implementation name is not written into saved configs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

BLOCK_SDPA = "agentrl_block_sdpa"


@dataclass(frozen=True)
class RowBlocks:
    """One forward row's layout: ``prefix_len`` shared tokens, then continuations at ``spans`` [start, end)."""

    prefix_len: int
    spans: tuple[tuple[int, int], ...]

    @property
    def length(self) -> int:
        """Tokens the row holds before its padding."""
        return self.spans[-1][1] if self.spans else self.prefix_len


@dataclass(frozen=True)
class AttentionBlocks:
    """The layouts of a micro-batch's forward rows, in row order."""

    rows: tuple[RowBlocks, ...]

    def check_width(self, width: int) -> None:
        """Refuse a layout that does not fit the tensors it is applied to (a packing bug, not user input)."""
        if any(row.length > width for row in self.rows):
            raise ValueError(f"attention blocks reach past the row width {width}: {self.rows}")
        for row in self.rows:
            starts = [start for start, _ in row.spans]
            if starts != [row.prefix_len, *(end for _, end in row.spans[:-1])]:
                raise ValueError(f"continuations must follow the prefix and each other without gaps: {row}")


def _continuation_mask(prefix_len: int, n: int, device: torch.device) -> torch.Tensor:
    """[n, prefix_len + n] bool: every prefix key, then causal over the continuation's own keys."""
    return torch.ones(n, prefix_len + n, dtype=torch.bool, device=device).tril(diagonal=prefix_len)


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float | None, dropout: float
) -> torch.Tensor:
    """SDPA with either a bool mask or (``mask`` None) the causal mask of a square block; key/value heads may
    serve several query heads each (GQA), which SDPA reads in place instead of from repeated copies."""
    return F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        dropout_p=dropout,
        is_causal=mask is None,
        scale=scale,
        enable_gqa=q.shape[1] != k.shape[1],
    )


def _row_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, row: RowBlocks, scale: float | None, dropout: float
) -> torch.Tensor:
    """[1, h, L, d] attention output of one row; padding positions get zeros (nothing attends to them)."""
    p = row.prefix_len
    sizes = [p, *(end - start for start, end in row.spans), q.shape[2] - row.length]
    # split, not slicing: each slice's backward writes its gradient into a zeroed tensor of the whole row
    qs, ks, vs = (x.split(sizes, dim=2) for x in (q, k, v))
    parts = [_sdpa(qs[0], ks[0], vs[0], None, scale, dropout)] if p else []
    for index, (start, end) in enumerate(row.spans, start=1):
        if p == 0:
            parts.append(_sdpa(qs[index], ks[index], vs[index], None, scale, dropout))
            continue
        keys = torch.cat([ks[0], ks[index]], dim=2)
        values = torch.cat([vs[0], vs[index]], dim=2)
        mask = _continuation_mask(p, end - start, q.device)
        parts.append(_sdpa(qs[index], keys, values, mask, scale, dropout))
    if sizes[-1]:
        parts.append(q.new_zeros(*q.shape[:2], sizes[-1], v.shape[-1]))
    return torch.cat(parts, dim=2)


def block_sdpa_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    attention_blocks: AttentionBlocks | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: [b, L, h, d] output, no weights."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_blocks is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if len(attention_blocks.rows) != query.shape[0]:
        raise ValueError(f"{len(attention_blocks.rows)} row layouts for a batch of {query.shape[0]} rows")
    attention_blocks.check_width(query.shape[2])
    rows = [
        _row_attention(q, k, v, row, scaling, dropout)
        for q, k, v, row in zip(query.split(1), key.split(1), value.split(1), attention_blocks.rows, strict=True)
    ]
    return torch.cat(rows, dim=0).transpose(1, 2).contiguous(), None


def register_block_attention() -> None:
    """Make ``agentrl_block_sdpa`` a transformers attention implementation (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(BLOCK_SDPA, block_sdpa_attention)
    AttentionMaskInterface.register(BLOCK_SDPA, sdpa_mask)  # causal masks for calls without a custom 4D mask


def blocks_of(prefix_lens: Sequence[int], starts: Sequence[Sequence[int]], lengths: Sequence[int]) -> AttentionBlocks:
    """Layouts from each row's prefix length, continuation starts and unpadded length."""
    rows = []
    for p, row_starts, length in zip(prefix_lens, starts, lengths):
        ends = [*row_starts[1:], length]
        rows.append(RowBlocks(p, tuple(zip(row_starts, ends))))
    return AttentionBlocks(tuple(rows))
