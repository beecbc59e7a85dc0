"""A slot KV cache for continuous batching over Hugging Face decoder models.

Rows are request slots kept compact in ``[0, num_rows)``. Every row is right-aligned to one shared
write column ``end``: row r holds its ``lengths[r]`` cached tokens in columns ``[end - lengths[r], end)``.
A forward pass writes its new keys/values at ``[write, write + n)`` and attends over ``[lo, write + n)``
under an explicit 4D additive mask, so rows of different lengths share one forward pass.

Two ways to drive it: the transformers-Cache surface (``begin_prefill`` / ``begin_decode`` /
``begin_extend``, then ``update`` per layer: what an HF forward calls), and mixed steps for the lean
forward (``begin_step`` / ``write_step`` / ``end_step``): one pass that decodes every running row and
admits new rows, each new row either a whole prompt or the tail of a prompt whose head's keys/values
come from the prefix cache, with the new tokens packed flat (no padding in the matmuls).
"""

from __future__ import annotations

import torch

from agentrl.engines.embedded.step_layout import StepLayout
from agentrl.errors import EngineError

PrefixKV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values ``[kv_heads, tokens, head_dim]``
__all__ = ["PrefixKV", "SlotKVCache", "StepLayout", "max_cols_bound"]


class SlotKVCache:
    """Per-layer key/value buffers ``[rows_cap, kv_heads, cols_cap, head_dim]`` that grow on demand.

    It duck-types the part of ``transformers.Cache`` a decoder layer calls (``update``,
    ``get_seq_length``); the engine sets the window of the next forward with ``begin_prefill`` or
    ``begin_decode`` and commits it with ``end_decode`` (prefill needs no commit).
    """

    is_compileable = False

    def __init__(self, num_layers: int, *, max_cols: int, max_rows: int | None = None) -> None:
        self.num_layers = num_layers
        self.max_cols = max_cols
        # the scheduler never runs more rows than its batch size: doubling past it would only hold unused memory
        self.max_rows = max_rows
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.rows_cap = 0
        self.cols_cap = 0
        self.end = 0
        self.lengths: list[int] = []
        self._rows = (0, 0)
        self._lo = 0
        self._write = 0
        # additive decode mask over every column, rebuilt only when rows or the layout change: a row's
        # first column (end - length) is fixed while decode steps advance ``end`` and every length alike
        self._decode_mask_cols: torch.Tensor | None = None

    @property
    def num_rows(self) -> int:
        """Live request rows."""
        return len(self.lengths)

    # --- the transformers Cache surface a decoder layer uses -------------------------------------
    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store this forward's keys/values at the write window; return the attended window."""
        if self.keys[layer_idx] is None:
            self._allocate_layer(layer_idx, key_states, value_states)
        r0, r1 = self._rows
        w, n = self._write, key_states.shape[2]
        k_buf, v_buf = self.keys[layer_idx], self.values[layer_idx]
        k_buf[r0:r1, :, w : w + n] = key_states
        v_buf[r0:r1, :, w : w + n] = value_states
        return k_buf[r0:r1, :, self._lo : w + n], v_buf[r0:r1, :, self._lo : w + n]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Columns before the write position inside the current window."""
        return self._write - self._lo

    # --- windows ---------------------------------------------------------------------------------
    def begin_prefill(self, prompt_lengths: list[int]) -> tuple[int, int]:
        """Append rows for new prompts (left-padded to the longest); returns (first_row, padded_len)."""
        padded = max(prompt_lengths)
        first = self.num_rows
        self._ensure(first + len(prompt_lengths), padded, 0)
        self.lengths.extend(prompt_lengths)
        self._decode_mask_cols = None
        self._rows = (first, first + len(prompt_lengths))
        self._lo = self._write = self.end - padded
        return first, padded

    def begin_extend(self, prefix_kv: PrefixKV, suffix_len: int) -> int:
        """Append one row whose first tokens' keys/values are given (``[kv_heads, P, head_dim]`` per layer)
        and open a window that writes its ``suffix_len`` new tokens after them; returns the prefix length P."""
        prefix = prefix_kv[0][0].shape[1]
        row = self.num_rows
        self._ensure(row + 1, prefix + suffix_len, 0)
        start = self.end - suffix_len - prefix
        self._copy_prefix(row, start, prefix_kv)
        self.lengths.append(prefix + suffix_len)
        self._decode_mask_cols = None
        self._rows = (row, row + 1)
        self._lo = start
        self._write = self.end - suffix_len
        return prefix

    def begin_step(
        self, decode_rows: int, new_rows: list[tuple[PrefixKV | None, int]], dtype: torch.dtype, device: torch.device
    ) -> StepLayout:
        """Lay out one mixed step: every running row decodes one token (``decode_rows`` is 0 or all of
        them) and each new row, given as (kept prefix keys/values or None, count of new tokens), is
        appended right-aligned with the rest; prefixes are copied in now."""
        if decode_rows not in (0, self.num_rows):
            raise EngineError(f"a step decodes all {self.num_rows} running rows or none, not {decode_rows}")
        advance = 1 if decode_rows else 0
        totals = [(0 if kv is None else kv[0][0].shape[1]) + n for kv, n in new_rows]
        longest = max(self.lengths) if decode_rows else 0
        self._ensure(self.num_rows + len(new_rows), max(longest, max(totals, default=0) - advance), advance)
        last_col = self.end - 1 + advance  # the column every row's newest token is written to
        if not new_rows:  # the common step: decode only, nothing else to lay out
            lo = self.end - longest
            return StepLayout(
                decode_rows,
                0,
                1,
                torch.tensor(self.lengths, device=device),
                None,
                decode_lo=lo,
                decode_mask=self.decode_mask(lo, dtype, device),
            )
        decode: dict[str, object] = {}
        if decode_rows:
            lo = self.end - longest
            decode = {"decode_lo": lo, "decode_mask": self.decode_mask(lo, dtype, device)}
        new_max = max(n for _, n in new_rows)
        positions, logit_index = list(self.lengths) if decode_rows else [], list(range(decode_rows))
        rows_index, cols_index, pad_index = self._place_new_rows(
            new_rows, totals, last_col, new_max, positions, logit_index
        )
        new_lo = last_col + 1 - max(totals)
        new_mask = self._new_rows_mask(totals, [n for _, n in new_rows], new_max, last_col + 1 - new_lo, dtype, device)
        self.lengths.extend(t - advance for t in totals)  # end_step adds the advance to every row
        self._decode_mask_cols = None

        def as_tensor(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, device=device)

        return StepLayout(
            decode_rows,
            len(new_rows),
            advance,
            as_tensor(positions),
            as_tensor(logit_index),
            **decode,
            new_lo=new_lo,
            new_max=new_max,
            new_mask=new_mask,
            pad_index=as_tensor(pad_index),
            new_rows_index=as_tensor(rows_index),
            new_cols_index=as_tensor(cols_index),
        )

    def _place_new_rows(
        self,
        new_rows: list[tuple[PrefixKV | None, int]],
        totals: list[int],
        last_col: int,
        new_max: int,
        positions: list[int],
        logit_index: list[int],
    ) -> tuple[list[int], list[int], list[int]]:
        """Copy each new row's kept prefix in, extend ``positions`` / ``logit_index`` with its tokens, and
        return the cache row, cache column and padded-view slot of every new token."""
        first_row = self.num_rows
        rows_index: list[int] = []
        cols_index: list[int] = []
        pad_index: list[int] = []
        for i, ((kv, n), total) in enumerate(zip(new_rows, totals)):
            if kv is not None:
                self._copy_prefix(first_row + i, last_col + 1 - total, kv)
            positions.extend(range(total - n, total))
            rows_index.extend([first_row + i] * n)
            cols_index.extend(range(last_col + 1 - n, last_col + 1))
            pad_index.extend(range(i * new_max, i * new_max + n))
            logit_index.append(len(positions) - 1)
        return rows_index, cols_index, pad_index

    def write_step(
        self, layer: int, layout: StepLayout, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[tuple[torch.Tensor, torch.Tensor] | None, tuple[torch.Tensor, torch.Tensor] | None]:
        """Store the step's flat keys/values ``[tokens, kv_heads, head_dim]``; return the decode window
        ``[R, kv_heads, cols, head_dim]`` and the new rows' window (None for an absent part)."""
        if self.keys[layer] is None:
            self._allocate_layer(layer, keys[:1, :, None], values[:1, :, None])
        k_buf, v_buf = self.keys[layer], self.values[layer]
        r, col = layout.decode_rows, self.end - 1 + layout.advance
        decode = new = None
        if r:
            k_buf[:r, :, col] = keys if not layout.new_rows else keys[:r]
            v_buf[:r, :, col] = values if not layout.new_rows else values[:r]
            decode = (k_buf[:r, :, layout.decode_lo : col + 1], v_buf[:r, :, layout.decode_lo : col + 1])
        if layout.new_rows:
            k_buf[layout.new_rows_index, :, layout.new_cols_index] = keys[r:]
            v_buf[layout.new_rows_index, :, layout.new_cols_index] = values[r:]
            first = self.num_rows - layout.new_rows
            new = (
                k_buf[first : self.num_rows, :, layout.new_lo : col + 1],
                v_buf[first : self.num_rows, :, layout.new_lo : col + 1],
            )
        return decode, new

    def end_step(self, layout: StepLayout) -> None:
        """Commit the step: with an advance, ``end`` and every row's length move on by one."""
        if layout.advance:
            self.end += 1
            self.lengths = [n + 1 for n in self.lengths]

    def _copy_prefix(self, row: int, start: int, kv: PrefixKV) -> None:
        length = kv[0][0].shape[1]
        for layer, (keys, values) in enumerate(kv):
            if self.keys[layer] is None:
                self._allocate_layer(layer, keys[None], values[None])
            self.keys[layer][row, :, start : start + length] = keys
            self.values[layer][row, :, start : start + length] = values

    @staticmethod
    def _new_rows_mask(
        totals: list[int], news: list[int], new_max: int, width: int, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        """``[k, 1, new_max, width]``: new token j of row i sees the row's prefix and its own tokens up to j;
        padding slots (j >= the row's count) see the row's first column only (no empty softmax row)."""
        totals_k1 = torch.tensor(totals, device=device)[:, None]
        news_k1 = torch.tensor(news, device=device)[:, None]
        cols = torch.arange(width, device=device)
        j = torch.arange(new_max, device=device)[None, :]
        first_k1 = width - totals_k1  # the row's first column inside the window
        own_kj = width - news_k1 + j  # column of new token j of the row
        valid = (cols[None, None, :] >= first_k1[:, :, None]) & (cols[None, None, :] <= own_kj[:, :, None])
        padding = (j >= news_k1)[:, :, None] & (cols[None, None, :] == first_k1[:, :, None])
        valid = torch.where((j < news_k1)[:, :, None], valid, padding)
        return _additive(valid, dtype)[:, None]

    def row_kv(self, row: int, length: int | None = None) -> PrefixKV:
        """Copies of ``row``'s first ``length`` (default: all) cached keys/values.

        One ``[kv_heads, length, head_dim]`` tensor pair per layer.
        """
        lo = self.end - self.lengths[row]
        hi = self.end if length is None else lo + min(length, self.lengths[row])
        return [
            (k[row, :, lo:hi].clone(), v[row, :, lo:hi].clone())
            for k, v in zip(self.keys, self.values)
            if k is not None
        ]

    def begin_decode(self) -> int:
        """Open a one-token window over all rows; returns ``lo``, the window's first column."""
        self._ensure(self.num_rows, max(self.lengths), 1)
        self._rows = (0, self.num_rows)
        self._lo = self.end - max(self.lengths)
        self._write = self.end
        return self._lo

    def end_decode(self) -> None:
        """Commit the decode step: every row gained one cached token."""
        self.end += 1
        self.lengths = [n + 1 for n in self.lengths]

    def remove_row(self, row: int) -> None:
        """Drop ``row``; the last row moves into its slot (callers mirror this move)."""
        last = self.num_rows - 1
        if row != last:
            lo = self.end - self.lengths[last]
            for buf in (*self.keys, *self.values):
                if buf is not None:
                    buf[row, :, lo : self.end] = buf[last, :, lo : self.end]
            self.lengths[row] = self.lengths[last]
        self.lengths.pop()
        self._decode_mask_cols = None
        if not self.lengths:
            self.end = 0

    def clear(self) -> None:
        """Drop every row (buffers are kept for reuse)."""
        self.lengths = []
        self.end = 0
        self._decode_mask_cols = None

    def free(self) -> None:
        """Drop every row and the buffers themselves; the next forward allocates them again."""
        self.clear()
        self.keys = [None] * self.num_layers
        self.values = [None] * self.num_layers
        self.rows_cap = self.cols_cap = 0

    # --- masks and positions ---------------------------------------------------------------------
    def decode_mask(self, lo: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
        """Additive mask ``[rows, 1, 1, end + 1 - lo]``: 0 on each row's cached tokens and the new one.

        None when every row has the same length (the window holds no other row's padding).
        """
        if min(self.lengths) == max(self.lengths):
            return None
        mask = self._decode_mask_cols
        if mask is None or mask.dtype != dtype or mask.device != device:
            cols = torch.arange(self.cols_cap, device=device)
            starts = self.end - torch.tensor(self.lengths, device=device)
            mask = self._decode_mask_cols = _additive(cols[None, :] >= starts[:, None], dtype)
        return mask[:, None, None, lo : self.end + 1]

    def prefill_mask(
        self, prompt_lengths: list[int], padded: int, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        """Additive causal mask ``[k, 1, padded, padded]`` that hides each prompt's left padding."""
        idx = torch.arange(padded, device=device)
        causal = idx[None, :] <= idx[:, None]
        pads = padded - torch.tensor(prompt_lengths, device=device)
        key_ok = idx[None, :] >= pads[:, None]
        # padding queries see only themselves, so no softmax row is empty (an empty row gives NaN)
        valid = (causal[None] & key_ok[:, None, :]) | torch.eye(padded, dtype=torch.bool, device=device)[None]
        return _additive(valid, dtype)[:, None]

    @staticmethod
    def extend_mask(prefix: int, suffix: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """Additive mask ``[1, 1, suffix, prefix + suffix]``: every prefix token, then causal over the suffix."""
        cols = torch.arange(prefix + suffix, device=device)
        rows = torch.arange(suffix, device=device)
        return _additive(cols[None, :] <= prefix + rows[:, None], dtype)[None, None]

    # --- storage ---------------------------------------------------------------------------------
    def _allocate_layer(self, layer_idx: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        kv_heads, k_dim, v_dim = key_states.shape[1], key_states.shape[3], value_states.shape[3]
        self.keys[layer_idx] = key_states.new_zeros(self.rows_cap, kv_heads, self.cols_cap, k_dim)
        self.values[layer_idx] = value_states.new_zeros(self.rows_cap, kv_heads, self.cols_cap, v_dim)

    def _ensure(self, rows: int, window: int, extra: int) -> None:
        """Make room for ``rows`` rows, ``window`` columns before ``end`` and ``extra`` after it."""
        if window + extra > self.max_cols:
            raise EngineError(
                f"KV window of {window + extra} tokens exceeds max_seq_len={self.max_cols}; raise engine.max_seq_len"
            )
        live_lo = self.end - max(self.lengths, default=0)
        needs_cols = self.end < window or self.end + extra > self.cols_cap
        if rows <= self.rows_cap and not needs_cols:
            return
        live = self.end - live_lo
        start = max(window, live)  # new ``end``: enough room on the left for the window
        # keep half the columns free after a relayout, so relayouts stay rare (amortised O(1) per token)
        cols = self.cols_cap if 2 * (start + extra) <= self.cols_cap else max(2 * (start + extra), 64)
        cols = min(cols, max_cols_bound(self.max_cols))  # bounded memory; still >= start + extra
        rows_cap = self.rows_cap if rows <= self.rows_cap else max(2 * self.rows_cap, rows, 4)
        if self.max_rows is not None:
            rows_cap = max(rows, min(rows_cap, self.max_rows))
        self._relayout(rows_cap, cols, live_lo, start)

    def _relayout(self, rows_cap: int, cols_cap: int, live_lo: int, new_end: int) -> None:
        """Copy live columns ``[live_lo, end)`` to end at ``new_end`` in fresh buffers."""
        n, live = self.num_rows, self.end - live_lo
        for bufs in (self.keys, self.values):
            for i, old in enumerate(bufs):
                if old is None:
                    continue
                new = old.new_zeros(rows_cap, old.shape[1], cols_cap, old.shape[3])
                if n and live:
                    new[:n, :, new_end - live : new_end] = old[:n, :, live_lo : self.end]
                bufs[i] = new
        self.rows_cap, self.cols_cap, self.end = rows_cap, cols_cap, new_end
        self._decode_mask_cols = None


def max_cols_bound(max_cols: int) -> int:
    """Columns a ``SlotKVCache`` with ``max_cols`` holds at most (its memory bound, with rows x bytes/token):
    ``max_cols`` plus a quarter as headroom, so that, with every row right-aligned to one write column, a
    full-length window relayouts (copies the live keys/values) at most once per max_cols / 4 decode steps."""
    return max_cols + max_cols // 4 + 1


def _additive(valid: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where ``valid``, the dtype's most negative finite value elsewhere (finite: no NaN)."""
    zero = torch.zeros((), dtype=dtype, device=valid.device)
    return torch.where(valid, zero, torch.finfo(dtype).min)
