"""Episodes -> trainer rows (one per episode) -> token-budget micro-batches of right-padded tensors.

Invariants: a segment's position t predicts ``input_ids[t + 1]``; its ``logp_old``/``mask``/``adv``
arrays have length ``len(input_ids) - 1`` and the completion token at position P + j sits at index
P + j - 1, holding the engine's logprob of exactly that token. An episode is ONE loss row
(docs/algorithm.md#the-divisor-n: s_i and |y_i| over all its assistant tokens, N counts episodes) even when
a chat template that rewrites history split it into several token segments: each segment is its own forward context, and
their position arrays are concatenated into the episode's loss row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from agentrl.algos.config import AlgorithmConfig
from agentrl.algos.credit import turn_advantages_of
from agentrl.errors import ConfigError
from agentrl.trainer.block_attention import AttentionBlocks
from agentrl.trajectory import Episode, TokenSegment


@dataclass
class TrainRow:
    """One episode aligned for next-token logprobs: one loss row; one forward context per token segment.

    The per-position lists concatenate the segments' ``len(segment) - 1`` positions in order.
    """

    segments: list[list[int]]
    logp_old: list[float]
    mask: list[bool]
    turn_ids: list[int]
    adv: list[float]
    episode_index: int
    stale_tokens: int = 0
    versions: list[int] = field(default_factory=list)  # policy version per position (-1 off-policy); [] unknown
    logp_behaviour: list[float] = field(default_factory=list)  # the engine's, once a recompute replaced logp_old
    # the proximal (pi_old) is the step-start policy and this row trains in mini-batch 0, whose forward runs at the
    # step-start weights: that forward's detached logprobs are the proximal, with no recompute pass of its own
    proximal_from_forward: bool = False

    @property
    def length(self) -> int:
        """Longest segment: the padded width of this row's forward passes."""
        return max(len(s) for s in self.segments)

    @property
    def tokens(self) -> int:
        """Tokens the forward passes see (all segments)."""
        return sum(len(s) for s in self.segments)

    @property
    def trainable(self) -> bool:
        """False when no masked token has a non-zero advantage: such a row gives exactly zero gradient."""
        return any(m and a != 0.0 for m, a in zip(self.mask, self.adv))

    @classmethod
    def concat(cls, parts: Sequence[TrainRow]) -> TrainRow:
        """One episode's row from its segments' rows, in order."""
        first = parts[0]
        return cls(
            [ids for p in parts for ids in p.segments],
            [x for p in parts for x in p.logp_old],
            [x for p in parts for x in p.mask],
            [x for p in parts for x in p.turn_ids],
            [x for p in parts for x in p.adv],
            first.episode_index,
            sum(p.stale_tokens for p in parts),
            [x for p in parts for x in p.versions],
        )


@dataclass
class MicroBatch:
    """Right-padded tensors of a few rows; causal attention makes right padding invisible to real tokens.

    ``input_ids``/``select`` are the forward layout (one row per segment); the other tensors are the
    loss layout (one row per episode). ``loss_index`` maps loss positions into the flattened forward
    logprobs; it is None when every episode has one segment (the two layouts are then the same).
    """

    input_ids: torch.Tensor  # [f, L] long
    logp_old: torch.Tensor  # [b, T] fp32
    mask: torch.Tensor  # [b, T] bool
    adv: torch.Tensor  # [b, T] fp32
    turn_ids: torch.Tensor  # [b, T] long, -1 off-turn
    versions: torch.Tensor  # [b, T] long, -1 off-policy or unknown
    select: torch.Tensor  # [f, L-1] bool: forward positions whose logprob the loss needs
    loss_index: torch.Tensor | None = None  # [b, T] long into the flattened [f, L-1] forward logprobs
    rows: list[TrainRow] = field(default_factory=list)
    logp_behaviour: torch.Tensor | None = None  # [b, T] fp32 the engine's logprobs, when logp_old is a recompute
    position_ids: torch.Tensor | None = None  # [f, L] long, when rows share a prefix (trainer/shared_prefix.py)
    attention: torch.Tensor | None = None  # [f, 1, L, L] bool, True where a query may attend; None = causal
    blocks: AttentionBlocks | None = None  # the layouts behind ``attention``, for block-by-block attention

    @property
    def targets(self) -> torch.Tensor:
        """Token ids predicted at each forward position: input_ids shifted left by one."""
        return self.input_ids[:, 1:]

    def loss_layout(self, logp_fwd: torch.Tensor) -> torch.Tensor:
        """Forward-layout logprobs [f, L-1] as loss rows [b, T] (differentiable; padding values are unused)."""
        if self.loss_index is None:
            return logp_fwd
        return logp_fwd.reshape(-1)[self.loss_index]

    def to(self, device: torch.device | str) -> MicroBatch:
        """The same micro-batch on ``device``."""

        def moved(tensor: torch.Tensor | None) -> torch.Tensor | None:
            return tensor.to(device) if tensor is not None else None

        tensors = (self.input_ids, self.logp_old, self.mask, self.adv, self.turn_ids, self.versions, self.select)
        return MicroBatch(
            *(t.to(device) for t in tensors),
            loss_index=moved(self.loss_index),
            rows=self.rows,
            logp_behaviour=moved(self.logp_behaviour),
            position_ids=moved(self.position_ids),
            attention=moved(self.attention),
            blocks=self.blocks,
        )


def segment_row(
    segment: TokenSegment,
    turn_adv: Sequence[float],
    episode_index: int,
    current_version: int,
    max_token_lag: int | None,
) -> TrainRow:
    """Align one segment: shift its completion arrays onto next-token positions; mask stale tokens."""
    ids = segment.input_ids
    n_prompt = len(segment.prompt_ids)
    width = max(len(ids) - 1, 0)
    logp = [0.0] * width
    mask = [False] * width
    turns = [-1] * width
    adv = [0.0] * width
    versions = [-1] * width
    stale = 0
    for j, (lp, m, k, v) in enumerate(zip(segment.logprobs, segment.loss_mask, segment.turn_ids, segment.versions)):
        pos = n_prompt + j - 1
        if pos < 0 or not m or k < 0:
            continue  # the very first token of an empty prompt has no context to be predicted from
        if max_token_lag is not None and current_version - v > max_token_lag:
            stale += 1
            continue
        logp[pos], mask[pos], turns[pos], adv[pos], versions[pos] = float(lp), True, k, float(turn_adv[k]), v
    return TrainRow([list(ids)], logp, mask, turns, adv, episode_index, stale, versions)


def build_rows(
    groups: Sequence[Sequence[Episode]], group_size: int, algo: AlgorithmConfig, current_version: int
) -> list[TrainRow]:
    """Per-turn advantages for every group by the configured scheme, then one row per episode; a canary episode's
    row masks every token (it stays in the batch's shape, out of the loss).

    The credit is docs/algorithm.md#per-turn-credit.
    """
    episodes: list[Episode] = []
    for index, group in enumerate(groups):
        if len(group) != group_size:
            raise ConfigError(
                f"group {index} has {len(group)} episodes but rollout.group_size is {group_size}; "
                "the rollout must hand the trainer complete groups"
            )
        episodes.extend(group)
    turn_adv = turn_advantages_of(episodes, group_size, algo)
    rows = [
        TrainRow.concat([segment_row(seg, turn_adv[i], i, current_version, algo.max_token_lag) for seg in ep.segments])
        for i, ep in enumerate(episodes)
    ]
    for row, episode in zip(rows, episodes, strict=True):
        if episode.canary:  # a canary (info["canary"]) is never trained on: no token of it enters the loss
            row.mask = [False] * len(row.mask)
            row.adv = [0.0] * len(row.adv)
    return rows


def split_mini_batches(rows: list[TrainRow], num: int) -> list[list[TrainRow]]:
    """``num`` equal-sized mini-batches (whole rows), each holding an equal share of the rows that carry signal.

    Rows whose advantages are all zero give no gradient, so a contiguous slice of them would cost an
    optimizer step's worth of nothing while the signal crowds into the other slices; the number of
    optimizer steps an update takes would then depend on where the signal groups happen to fall. The
    trainable rows are cut in order into ``num`` contiguous runs as equal as possible (groups stay
    together as far as the cut allows) and each run is topped up with zero-advantage rows to the common
    size, which keeps every mini-batch's N (the loss normaliser) the same as a plain slice's.
    """
    if num < 1 or len(rows) % num != 0:
        raise ConfigError(
            f"{len(rows)} rows do not split into {num} equal mini-batches; make "
            "rollout.prompts_per_step * rollout.group_size divisible by trainer.mini_batches"
        )
    size = len(rows) // num
    signal = [r for r in rows if r.trainable]
    filler = iter([r for r in rows if not r.trainable])
    base, extra = divmod(len(signal), num)
    minis: list[list[TrainRow]] = []
    start = 0
    for i in range(num):
        end = start + base + (1 if i < extra else 0)
        minis.append(signal[start:end] + [next(filler) for _ in range(size - (end - start))])
        start = end
    return minis


def pack_micro_batches(rows: Sequence[TrainRow], token_budget: int) -> list[MicroBatch]:
    """First-fit by decreasing length so each micro-batch holds <= token_budget padded forward tokens.

    Sorting by length keeps padding to the few tokens between neighbouring lengths; a row longer
    than the budget gets a micro-batch of its own (an episode's segments always travel together).
    """
    order = sorted(range(len(rows)), key=lambda i: (-rows[i].length, i))
    bins: list[list[TrainRow]] = []
    for i in order:
        row = rows[i]
        forward_rows = sum(len(r.segments) for r in bins[-1]) if bins else 0
        if bins and (forward_rows + len(row.segments)) * bins[-1][0].length <= token_budget:
            bins[-1].append(row)
        else:
            bins.append([row])
    return [collate(b) for b in bins]


def pad_rows(
    values: Sequence[Sequence[float | int | bool]], width: int, fill: float, dtype: torch.dtype
) -> torch.Tensor:
    """Right-padded [len(values), width] tensor."""
    out = torch.full((len(values), width), fill, dtype=dtype)
    for i, row in enumerate(values):
        if row:
            out[i, : len(row)] = torch.tensor(list(row), dtype=dtype)
    return out


def loss_tensors(rows: Sequence[TrainRow], width: int) -> tuple[torch.Tensor, ...]:
    """The loss layout's (logp_old, mask, adv, turn_ids, versions), right-padded to ``width``."""
    return (
        pad_rows([r.logp_old for r in rows], width, 0.0, torch.float32),
        pad_rows([r.mask for r in rows], width, False, torch.bool),
        pad_rows([r.adv for r in rows], width, 0.0, torch.float32),
        pad_rows([r.turn_ids for r in rows], width, -1, torch.long),
        pad_rows([r.versions or [-1] * len(r.mask) for r in rows], width, -1, torch.long),
    )


def behaviour_tensor(rows: Sequence[TrainRow], width: int) -> torch.Tensor | None:
    """The engine's logprobs where a recompute replaced logp_old (else logp_old itself); None if no row has them."""
    if not any(r.logp_behaviour for r in rows):
        return None
    return pad_rows([r.logp_behaviour or r.logp_old for r in rows], width, 0.0, torch.float32)


def collate(rows: Sequence[TrainRow], pad_id: int = 0) -> MicroBatch:
    """Right-pad rows into tensors (padding has mask False, so its values never matter)."""
    segments = [ids for r in rows for ids in r.segments]
    length = max(len(ids) for ids in segments)
    width = max(len(r.mask) for r in rows)
    input_ids = pad_rows(segments, length, pad_id, torch.long)
    loss = loss_tensors(rows, width)
    if len(segments) == len(rows):  # one segment per episode: the forward rows are the loss rows
        micro = MicroBatch(input_ids, *loss, loss[1], None, list(rows))
    else:
        micro = _collate_segments(rows, input_ids, loss)
    micro.logp_behaviour = behaviour_tensor(rows, width)
    return micro


def _collate_segments(rows: Sequence[TrainRow], input_ids: torch.Tensor, loss: tuple[torch.Tensor, ...]) -> MicroBatch:
    """Forward rows per segment; each loss position indexes its segment's position in the forward output."""
    mask = loss[1]
    fwd_width = input_ids.shape[1] - 1
    select = torch.zeros(input_ids.shape[0], fwd_width, dtype=torch.bool)
    loss_index = torch.zeros(mask.shape, dtype=torch.long)
    fwd = 0
    for i, row in enumerate(rows):
        offset = 0
        for ids in row.segments:
            n = len(ids) - 1
            if n > 0:
                select[fwd, :n] = mask[i, offset : offset + n]
                loss_index[i, offset : offset + n] = fwd * fwd_width + torch.arange(n)
            offset += max(n, 0)
            fwd += 1
    return MicroBatch(input_ids, *loss, select=select, loss_index=loss_index, rows=list(rows))
