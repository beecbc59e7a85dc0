"""Supervised warm-up on whole chats, tokenized exactly as a rollout records them.

A small model that cannot follow an environment's protocol at all (write a code block, read the feedback,
fix it) gets no reward signal for RL to work with. A few supervised passes over scripted chats teach the
format first. Each chat goes through a ``TokenLedger`` (the rollout's own token record): the assistant
turns are the trained tokens (loss mask 1), everything else is template and env text (mask 0), so the warm-up
trains the very token sequences RL will later sample and score, with no second tokenization to drift.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field

from agentrl.chat import ChatAssembler
from agentrl.chat.messages import Message
from agentrl.errors import ConfigError
from agentrl.models.loading import set_activation_checkpointing
from agentrl.trainer.logprobs import PolicyLogprobs
from agentrl.trajectory import Episode, TokenSegment
from agentrl.trajectory.ledger import TokenLedger


class SftConfig(BaseModel):
    """Settings of a supervised warm-up (``run_sft``)."""

    model_config = ConfigDict(extra="forbid")

    epochs: int = Field(2, ge=1, description="Passes over the chats.")
    lr: float = Field(2e-5, gt=0, description="AdamW learning rate (constant).")
    batch_tokens: int = Field(4096, ge=64, description="Tokens per optimizer step (whole chats, packed greedily).")
    micro_batch_tokens: int | None = Field(
        1024,
        ge=64,
        description="Padded tokens per forward (whole chats; gradients accumulate to the same step). None: the whole "
        "batch in one forward (more memory for its activations and logits, no faster on a CPU).",
    )
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    seed: int = Field(0, description="Shuffling seed.")
    gradient_checkpointing: bool = Field(
        True,
        description="Recompute activations in the backward pass (a 135M model's 4096-token batch: ~15 GB without).",
    )


class SftReport(BaseModel):
    """What a warm-up did: sizes, per-step losses (mean token NLL) and time."""

    chats: int
    trained_tokens: int
    total_tokens: int
    steps: int
    loss_per_step: list[float]
    seconds: float


def end_of_turn_id(assembler: ChatAssembler) -> int | None:
    """The stop token the template writes right after an assistant message (e.g. ``<|im_end|>``), if any."""
    probe = "a reply"
    text = assembler.render(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": probe}], add_generation_prompt=False
    )
    after = text[text.rindex(probe) + len(probe) :]
    for token in assembler.stop_token_ids:
        if after.startswith(assembler.decode([token])):
            return token
    return None


def chat_tokens(assembler: ChatAssembler, chat: Sequence[Message]) -> TokenSegment:
    """The token row of ``chat`` as a rollout records it: assistant turns trained, the rest context.

    The chat must open with non-assistant messages and contain at least one assistant message. An assistant
    message with ``"trained": False`` stays in the context (the model sees it, e.g. a scripted wrong draft)
    but is not trained on.
    """
    messages = [dict(m) for m in chat]
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None or first == 0:
        raise ConfigError("an SFT chat needs opening messages and then at least one assistant message")
    ledger = TokenLedger(Episode(episode_id="sft", task_id="sft", group_id="sft"), assembler)
    ledger.start(messages[:first])
    stop = end_of_turn_id(assembler)
    turn, pending = 0, []
    context_turns: set[int] = set()
    for message in messages[first:]:
        if message["role"] != "assistant":
            pending.append(message)
            continue
        if pending:
            ledger.append_env(pending)
            pending = []
        elif turn > 0:
            raise ConfigError(
                f"SFT chat has two assistant messages in a row (turn {turn}): put the env's or user's reply between "
                "them, or merge them into one message"
            )
        ids = assembler.encode(message["content"]) + ([stop] if stop is not None else [])
        ledger.append_sampled(ids, [0.0] * len(ids), [0] * len(ids), turn)
        if message.get("trained", True) is False:
            context_turns.add(turn)
        ledger.end_turn(ledger.decode_turn(ids))
        turn += 1
    segment = ledger.segment  # untrained turns are masked only now: the ledger finds a turn's tokens by its mask
    segment.loss_mask = [0 if t in context_turns else m for m, t in zip(segment.loss_mask, segment.turn_ids)]
    return segment


def _batches(rows: list[TokenSegment], batch_tokens: int, rng: random.Random) -> list[list[TokenSegment]]:
    order = rows[:]
    rng.shuffle(order)
    batches: list[list[TokenSegment]] = [[]]
    for row in order:
        size = len(row.prompt_ids) + len(row.completion_ids)
        if batches[-1] and sum(len(r.prompt_ids) + len(r.completion_ids) for r in batches[-1]) + size > batch_tokens:
            batches.append([])
        batches[-1].append(row)
    return batches


def _micro_batches(rows: list[TokenSegment], micro_tokens: int | None) -> list[list[TokenSegment]]:
    """Whole chats by length, each group's padded size (rows x longest) within ``micro_tokens`` (one chat at least)."""
    if micro_tokens is None:
        return [rows]
    micros: list[list[TokenSegment]] = [[]]
    for row in sorted(rows, key=lambda r: len(r.prompt_ids) + len(r.completion_ids)):
        width = len(row.prompt_ids) + len(row.completion_ids)  # the longest so far: rows come sorted
        if micros[-1] and (len(micros[-1]) + 1) * width > micro_tokens:
            micros.append([])
        micros[-1].append(row)
    return micros


def _batch_loss(policy: PolicyLogprobs, rows: list[TokenSegment], pad_id: int) -> tuple[torch.Tensor, int]:
    """Sum of the NLL of the trained tokens of ``rows`` (right-padded into one batch), and their count."""
    width = max(len(r.prompt_ids) + len(r.completion_ids) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    select = torch.zeros((len(rows), width - 1), dtype=torch.bool)
    for b, row in enumerate(rows):
        ids = row.prompt_ids + row.completion_ids
        input_ids[b, : len(ids)] = torch.tensor(ids)
        start = len(row.prompt_ids) - 1  # position t predicts token t+1
        select[b, start : start + len(row.completion_ids)] = torch.tensor(row.loss_mask, dtype=torch.bool)
    logps = policy(input_ids, select, temperature=1.0).logp_bt
    return -(logps * select).sum(), int(select.sum())


def run_sft(
    lm: Any,
    assembler: ChatAssembler,
    chats: Sequence[Sequence[Message]],
    cfg: SftConfig,
    on_step: Callable[[int, int, float], None] | None = None,
) -> SftReport:
    """Train ``lm`` in place on the assistant turns of ``chats``; returns per-step mean token NLL.

    ``on_step(step, total_steps, loss)`` is called after every optimizer step (progress lines).
    """
    if not chats:
        raise ConfigError("no chats to train on: the warm-up needs at least one scripted chat")
    rows = [chat_tokens(assembler, chat) for chat in chats]
    pad_id = assembler.tokenizer.pad_token_id
    pad_id = int(pad_id if pad_id is not None else assembler.stop_token_ids[0])
    policy = PolicyLogprobs(lm)
    optimizer = torch.optim.AdamW(lm.parameters(), lr=cfg.lr, weight_decay=0.0)
    rng = random.Random(cfg.seed)
    losses: list[float] = []
    began = time.perf_counter()
    set_activation_checkpointing(lm, cfg.gradient_checkpointing)
    lm.train()
    # every epoch's batches drawn up front (the same shuffles in the same order), so progress knows the total
    plan = [batch for _ in range(cfg.epochs) for batch in _batches(rows, cfg.batch_tokens, rng)]
    for batch in plan:
        count = max(sum(sum(r.loss_mask) for r in batch), 1)
        optimizer.zero_grad(set_to_none=True)
        nll_sum = 0.0
        for micro in _micro_batches(batch, cfg.micro_batch_tokens):
            nll, _ = _batch_loss(policy, micro, pad_id)
            (nll / count).backward()  # the batch's mean token NLL, accumulated micro-batch by micro-batch
            nll_sum += float(nll.detach())
        torch.nn.utils.clip_grad_norm_(lm.parameters(), cfg.max_grad_norm)
        optimizer.step()
        value = nll_sum / count
        if not math.isfinite(value):
            raise FloatingPointError(f"SFT loss became {value} at step {len(losses) + 1}: lower sft lr")
        losses.append(value)
        if on_step is not None:
            on_step(len(losses), len(plan), value)
    lm.eval()
    if cfg.gradient_checkpointing:
        set_activation_checkpointing(lm, False)
    return SftReport(
        chats=len(rows),
        trained_tokens=sum(sum(r.loss_mask) for r in rows),
        total_tokens=sum(len(r.prompt_ids) + len(r.completion_ids) for r in rows),
        steps=len(losses),
        loss_per_step=losses,
        seconds=time.perf_counter() - began,
    )


def progress_line(step: int, total: int, loss: float, elapsed_s: float) -> str:
    """'step 3/12: token NLL 1.166 (223 s, ETA 14:52)': the remaining steps at the mean pace so far."""
    left = elapsed_s / max(step, 1) * (total - step)
    eta = f"{int(left // 60)}:{int(left % 60):02d}"
    return f"step {step}/{total}: token NLL {loss:.3f} ({elapsed_s:.0f} s, ETA {eta})"


def add_sft_arguments(parser: Any) -> None:
    """--epochs, --lr, --batch-tokens, --micro-batch-tokens, --seed: help and defaults from ``SftConfig``."""
    fields = SftConfig.model_fields
    for flag, name, kind in (
        ("--epochs", "epochs", int),
        ("--lr", "lr", float),
        ("--batch-tokens", "batch_tokens", int),
        ("--micro-batch-tokens", "micro_batch_tokens", int),
        ("--seed", "seed", int),
    ):
        text = fields[name].description or ""
        if name == "micro_batch_tokens":
            text = text.replace("None:", "0:")
        parser.add_argument(flag, type=kind, default=fields[name].default, help=text)


def publish_model(out: Path, lm: Any, tokenizer: Any, report: dict[str, Any]) -> None:
    """Write the warmed model directory beside ``out`` and rename it into place (fsynced: ``agentrl.util.disk``).

    ``out`` is then either absent, the previous model, or complete with its ``warmup.json``: a warm-up killed
    while saving leaves no half-written model that a config (or ``scripts/quickstart.sh``'s "already warmed"
    check) would take for a finished one.
    """
    from agentrl.util.disk import publish

    staging = out.with_name(out.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    lm.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    (staging / "warmup.json").write_text(json.dumps(report, indent=1))
    if out.exists():
        shutil.rmtree(out)  # a rename cannot replace a non-empty directory
    publish(staging, out)
