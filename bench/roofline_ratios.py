"""Speed-ups between two engine runs of ``bench/bench_roofline.py``, from their reports' cells."""

from __future__ import annotations

from typing import Any


def decode_ratios(engine: dict[str, Any], name: str, baseline: str) -> dict[str, float]:
    """Decode tokens/s of engine ``name`` over ``baseline`` at each batch, and prefill's."""
    ratios = {
        key: engine[name]["decode"][key]["tok_s"] / cell["tok_s"] for key, cell in engine[baseline]["decode"].items()
    }
    ratios["prefill"] = engine[name]["prefill"]["tok_s"] / engine[baseline]["prefill"]["tok_s"]
    return ratios


def bf16_ratios(engine: dict[str, Any], trainer: dict[str, Any], batches: list[int]) -> dict[str, float]:
    """Tokens/s of bf16 over fp32: decode per batch, prefill, the trainer with and without checkpointing."""
    out = {
        f"decode_b{b}": engine["bf16"]["decode"][f"b{b}"]["tok_s"] / engine["fp32"]["decode"][f"b{b}"]["tok_s"]
        for b in batches
    }
    out["prefill"] = engine["bf16"]["prefill"]["tok_s"] / engine["fp32"]["prefill"]["tok_s"]
    for c in ("nockpt", "ckpt"):
        out[f"train_{c}"] = trainer[f"bf16_{c}"]["tok_s"] / trainer[f"fp32_{c}"]["tok_s"]
    return out
