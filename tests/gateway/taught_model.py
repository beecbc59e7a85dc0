"""A tiny model taught a calculator exchange by a few SFT steps, so the real engine samples real tool calls.

A random tiny model never writes ``<tool_call>``; the gateway's tool-call path needs one, sampled by the real
engine (not a scripted reply). So the test fixture fine-tunes the tiny model on a few exchanges of
``gateway_agents.calc_agent`` (the tool call, then the number after the tool result), tokenized by the token
ledger exactly as a rollout records them, until the model reproduces them: training then runs on it as usual.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from gateway_agents import SYSTEM, TOOLS

from agentrl.chat import ChatAssembler
from agentrl.tools.toolcall import format_tool_call
from agentrl.trajectory import Episode
from agentrl.trajectory.ledger import TokenLedger

TAUGHT = [("What is 6 x 7?", 6, 7), ("What is 3 x 5?", 3, 5)]


def calc_tasks(max_calls: int = 3) -> list[dict[str, object]]:
    """The tasks the model was taught (``calc_agent``'s task dicts)."""
    return [{"task_id": f"mul-{a}-{b}", "question": q, "answer": a * b, "max_calls": max_calls} for q, a, b in TAUGHT]


def _exchange(assembler: ChatAssembler, question: str, a: int, b: int) -> tuple[list[int], list[int]]:
    """Token ids of one whole exchange and its loss mask, built by the ledger as a rollout builds them."""
    ledger = TokenLedger(Episode(episode_id="teach", task_id="t", group_id="g"), assembler)
    ledger.start([{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}])
    eos = assembler.stop_token_ids[0]
    for k, (content, after) in enumerate(
        [(format_tool_call("multiply", {"a": a, "b": b}), [{"role": "tool", "content": str(a * b)}]), (str(a * b), [])]
    ):
        ids = [*assembler.encode(content), eos]
        ledger.append_sampled(ids, [0.0] * len(ids), [0] * len(ids), k)
        ledger.end_turn(ledger.decode_turn(ids))
        if after:
            ledger.append_env(after)
    seg = ledger.segment
    return seg.input_ids, [0] * len(seg.prompt_ids) + seg.loss_mask


def teach_calculator(base_dir: Path, out_dir: Path, max_steps: int = 250) -> Path:
    """Copy the tiny model at ``base_dir`` to ``out_dir`` and teach it the exchanges of ``TAUGHT``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shutil.copytree(base_dir, out_dir, dirs_exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    assembler = ChatAssembler(tokenizer, tools=TOOLS)
    rows = [_exchange(assembler, q, a, b) for q, a, b in TAUGHT]
    width = max(len(ids) for ids, _ in rows)
    ids = torch.tensor([row + [0] * (width - len(row)) for row, _ in rows])
    keep = torch.tensor([mask + [0] * (width - len(mask)) for _, mask in rows], dtype=torch.bool)[:, 1:]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is several times faster on a shared machine
    try:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-2)
        for _ in range(max_steps):
            logits = model(ids).logits[:, :-1]
            loss = torch.nn.functional.cross_entropy(logits[keep], ids[:, 1:][keep])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if loss.item() < 5e-4:
                break
    finally:
        torch.set_num_threads(threads)
    assert loss.item() < 5e-3, f"the tiny model did not learn the exchanges (loss {loss.item():.4f})"
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir
