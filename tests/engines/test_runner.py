"""The slot KV cache + runner: rows joining, leaving and relayouts give the logits of a full forward."""

from __future__ import annotations

from pathlib import Path

import torch

from agentrl.engines.base import VersionSpan
from agentrl.engines.embedded.requests import spans_from_versions
from agentrl.engines.embedded.runner import ModelRunner


def test_join_leave_and_growth_match_full_forward(tiny_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    runner = ModelRunner(model, max_seq_len=512)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 2000, (n,), generator=gen).tolist() for n in (5, 17, 9, 40)]
    seqs = [list(p) for p in prompts[:2]]
    worst = 0.0

    def check(logits: torch.Tensor, rows: list[list[int]], verify: bool = True) -> None:
        nonlocal worst
        for i, seq in enumerate(rows):
            if verify:
                with torch.no_grad():
                    ref = model(torch.tensor([seq])).logits[0, -1]
                worst = max(worst, (ref - logits[i]).abs().max().item())
            seq.append(int(logits[i].argmax()))

    check(runner.prefill(prompts[:2]), seqs)
    for step in range(60):
        if step in (5, 20):  # a short and a long prompt join a running batch (the long one forces a shift)
            new = [list(prompts[2 if step == 5 else 3])]
            check(runner.prefill([p[:] for p in new]), new)
            seqs.extend(new)
        if step == 12:  # row 0 leaves: the last row moves into its slot
            runner.remove_row(0)
            seqs[0] = seqs.pop()
        check(runner.decode([s[-1] for s in seqs]), seqs, verify=step % 10 in (0, 1) or step > 57)
    assert worst < 1e-4
    assert runner.num_rows == len(seqs) == 3
    assert runner.cache.cols_cap > 64  # the buffers grew past their first allocation (relayouts)


def test_version_spans_run_length_encode() -> None:
    assert spans_from_versions([0, 0, 1, 1, 1, 2], 2) == [
        VersionSpan(0, 0, 2),
        VersionSpan(1, 2, 5),
        VersionSpan(2, 5, 6),
    ]
    assert spans_from_versions([], 4) == [VersionSpan(4, 0, 0)]
