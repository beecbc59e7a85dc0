"""Where one mixed step's tokens sit in the slot KV cache (``SlotKVCache.begin_step`` builds it)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class StepLayout:
    """Where one mixed step's tokens sit: ``decode_rows`` running rows (one token each, flat rows
    ``[0, R)``), then the new rows' tokens packed flat, row after row.

    New rows attend through a padded view ``[new_rows, max_new, ...]``: ``pad_index`` maps each flat
    new token to its slot in that view, ``logit_index`` picks the flat tokens whose logits are wanted
    (every decode token, each new row's last token).
    """

    decode_rows: int
    new_rows: int
    advance: int  # 1 when the running rows decode (``end`` moves on), else 0
    positions: torch.Tensor  # [tokens] rope positions
    logit_index: torch.Tensor | None  # [decode_rows + new_rows]; None when every token's logits are wanted
    decode_lo: int = 0  # first column of the decode window
    decode_mask: torch.Tensor | None = None  # [R, 1, 1, cols] or None (rows level)
    new_lo: int = 0  # first column of the new rows' window
    new_max: int = 0  # longest new token run (the padded view's length)
    new_mask: torch.Tensor | None = None  # [k, 1, new_max, cols]
    pad_index: torch.Tensor | None = None  # [new tokens] slot of each in the padded view
    new_rows_index: torch.Tensor | None = None  # [new tokens] cache row of each
    new_cols_index: torch.Tensor | None = None  # [new tokens] cache column of each
