"""Forward rows that share a prompt once: one packed row per set of episodes with a common token prefix.

A group's G episodes start with the same prompt. Laid out one row per episode, the update runs that
prompt through the model G times; packed, the row holds the prefix once and then each episode's own
continuation, and a block mask lets every continuation see the prefix and itself, never a sibling:

    tokens     p0 .. p(k-1) | c1_0 c1_1 .. | c2_0 c2_1 .. | ...
    positions  0  ..  k-1   |  k   k+1  .. |  k   k+1  .. | ...

Each continuation starts at the last token the episodes have in common (so the position before it, the
prefix's last, predicts the same token for all of them), and the loss layout gathers every episode's
positions back from the packed row, so the loss and its gradient are those of the unpacked rows (up
to float rounding: attention sums run over different lengths). The gain is the prompt's tokens times
(G - 1) per group in every update and recompute forward; the cost is attention over the packed length,
which ``max_len`` bounds. Only episodes with one token segment are packed (a history-rewriting
template's later segments have their own prompts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentrl.trainer.batch import MicroBatch, TrainRow, behaviour_tensor, loss_tensors, pack_micro_batches, pad_rows
from agentrl.trainer.block_attention import blocks_of

# A prefix shorter than this saves less than its block mask and bookkeeping cost (and chat templates' first
# tokens are the same for every prompt, so clustering by fewer would put unrelated rows together).
MIN_SHARED_TOKENS = 16


@dataclass
class ForwardUnit:
    """One forward row: the shared prefix once, then each member's continuation (a lone row has no prefix)."""

    members: list[int]  # indices into the caller's rows
    prefix_len: int  # k: tokens every member shares, laid out once; 0 for a lone row
    tokens: list[int]
    positions: list[int]
    starts: list[int]  # where each member's continuation begins in ``tokens``

    @property
    def saved(self) -> int:
        """Forward tokens this unit saves against one row per member."""
        return (len(self.members) - 1) * self.prefix_len

    @property
    def length(self) -> int:
        """Padded width this unit needs."""
        return len(self.tokens)

    def forward_positions(self, member: int, n: int) -> torch.Tensor:
        """Where the member's row positions 0..n-1 (position t predicts its token t + 1) sit in this unit."""
        t = torch.arange(n)
        return torch.where(t < self.prefix_len, t, self.starts[member] + t - self.prefix_len)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def lone_unit(index: int, ids: Sequence[int]) -> ForwardUnit:
    """A row laid out as it is."""
    return ForwardUnit([index], 0, list(ids), list(range(len(ids))), [0])


def shared_unit(members: list[int], sequences: Sequence[Sequence[int]]) -> ForwardUnit:
    """Members' sequences packed behind their common prefix minus one token (see the module doc)."""
    common = min(_common_prefix(sequences[0], s) for s in sequences[1:])
    k = max(common - 1, 0)  # common <= every length: the prefix is compared with each sequence
    tokens, positions, starts = list(sequences[0][:k]), list(range(k)), []
    for seq in sequences:
        starts.append(len(tokens))
        tokens.extend(seq[k:])
        positions.extend(range(k, len(seq)))
    return ForwardUnit(members, k, tokens, positions, starts)


def plan_units(sequences: Sequence[Sequence[int] | None], min_shared: int, max_len: int) -> list[ForwardUnit]:
    """Forward units for rows (``None``: a row that must stay alone, e.g. a multi-segment episode).

    Rows are clustered by their first ``min_shared`` tokens and sorted within a cluster, so rows with the
    longest common prefixes are neighbours; a unit takes the next row while that raises the tokens it
    saves ((members - 1) x prefix) and its packed length stays within ``max_len``.
    """
    clusters: dict[tuple[int, ...], list[int]] = {}
    units: list[ForwardUnit] = []
    for i, seq in enumerate(sequences):
        if seq is None or len(seq) <= min_shared:
            units.append(lone_unit(i, seq or []))
        else:
            clusters.setdefault(tuple(seq[:min_shared]), []).append(i)
    for members in clusters.values():
        members.sort(key=lambda i: (list(sequences[i]), i))  # type: ignore[arg-type]
        current = lone_unit(members[0], sequences[members[0]])  # type: ignore[arg-type]
        for i in members[1:]:
            chosen = [*current.members, i]
            candidate = shared_unit(chosen, [sequences[j] for j in chosen])  # type: ignore[misc]
            if candidate.length <= max_len and candidate.saved > current.saved and candidate.prefix_len >= min_shared:
                current = candidate
            else:
                units.append(current)
                current = lone_unit(i, sequences[i])  # type: ignore[arg-type]
        units.append(current)
    return units


def block_mask(units: Sequence[ForwardUnit], width: int) -> torch.Tensor:
    """[f, 1, L, L] bool, True where a query may attend: causal within the prefix and within each continuation,
    every continuation onto the whole prefix, padding onto itself only (a fully masked row would be NaN)."""
    mask = torch.zeros(len(units), 1, width, width, dtype=torch.bool)
    causal = torch.ones(width, width, dtype=torch.bool).tril()
    for f, unit in enumerate(units):
        k = unit.prefix_len
        mask[f, 0, :k, :k] = causal[:k, :k]
        ends = [*unit.starts[1:], unit.length]
        for start, end in zip(unit.starts, ends):
            n = end - start
            mask[f, 0, start:end, :k] = True
            mask[f, 0, start:end, start:end] = causal[:n, :n]
        pad = torch.arange(unit.length, width)
        mask[f, 0, pad, pad] = True
    return mask


def pack_shared_prefix(rows: Sequence[TrainRow], token_budget: int, max_len: int) -> list[MicroBatch]:
    """Micro-batches of at most ``token_budget`` padded forward tokens, rows sharing a prefix packed together.

    Multi-segment rows keep the plain layout (``pack_micro_batches``); the others are planned into units
    of at most ``min(max_len, token_budget)`` tokens, binned first-fit by decreasing length.
    """
    multi = [r for r in rows if len(r.segments) != 1]
    single = [r for r in rows if len(r.segments) == 1]
    units = plan_units([r.segments[0] for r in single], MIN_SHARED_TOKENS, min(max_len, token_budget))
    units.sort(key=lambda u: (-u.length, u.members[0]))
    bins: list[list[ForwardUnit]] = []
    for unit in units:
        if bins and (len(bins[-1]) + 1) * bins[-1][0].length <= token_budget:
            bins[-1].append(unit)
        else:
            bins.append([unit])
    return pack_micro_batches(multi, token_budget) + [collate_units(b, single) for b in bins]


def collate_units(units: Sequence[ForwardUnit], rows: Sequence[TrainRow], pad_id: int = 0) -> MicroBatch:
    """One micro-batch: forward rows = units (with positions and the block mask), loss rows = their members."""
    members = [rows[m] for unit in units for m in unit.members]
    length = max(unit.length for unit in units)
    width = max(len(r.mask) for r in members)
    fwd_width = length - 1
    select = torch.zeros(len(units), fwd_width, dtype=torch.bool)
    loss_index = torch.zeros(len(members), width, dtype=torch.long)
    b = 0
    for f, unit in enumerate(units):
        for j, m in enumerate(unit.members):
            n = len(rows[m].mask)
            positions = unit.forward_positions(j, n)
            loss_index[b, :n] = f * fwd_width + positions
            select[f, positions[torch.tensor(rows[m].mask, dtype=torch.bool)]] = True
            b += 1
    return MicroBatch(
        pad_rows([u.tokens for u in units], length, pad_id, torch.long),
        *loss_tensors(members, width),
        select,
        loss_index,
        members,
        logp_behaviour=behaviour_tensor(members, width),
        position_ids=pad_rows([u.positions for u in units], length, 0, torch.long),
        attention=block_mask(units, length),
        blocks=blocks_of([u.prefix_len for u in units], [u.starts for u in units], [u.length for u in units]),
    )
