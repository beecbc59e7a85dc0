"""``agentrl serve``: the embedded engine behind SGLang's native HTTP API (loopback by default)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any


def run(args: argparse.Namespace) -> int:
    """Load the model and serve until interrupted."""
    from agentrl.config.sections import ModelConfig
    from agentrl.engines.embedded.config import EmbeddedEngineConfig
    from agentrl.engines.embedded.engine import EmbeddedEngine
    from agentrl.engines.factory import resolve_device_dtype
    from agentrl.serve.server import serve
    from agentrl.trainer.checkpoint import model_dir_of

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    engine_cfg = EmbeddedEngineConfig(
        max_batch_size=args.max_batch_size,
        max_seq_len=args.max_seq_len,
        seed=args.seed,
        on_weight_update=args.on_weight_update,
        prefix_cache_tokens=args.prefix_cache_tokens,
        share_prefixes=not args.no_prefix_sharing,
    )
    model = str(model_dir_of(args.model))
    if model != args.model:
        print(f"[serve] model directory: {model}", flush=True)
    device, dtype = resolve_device_dtype(ModelConfig(path=model, device=args.device, dtype=args.dtype))
    engine = EmbeddedEngine.from_pretrained(model, config=engine_cfg, device=device, dtype=dtype)
    try:
        asyncio.run(serve(engine, args.host, args.port))
    except KeyboardInterrupt:
        pass
    return 0


def register(subparsers: Any) -> None:
    """Add the ``serve`` subcommand."""
    parser = subparsers.add_parser(
        "serve",
        help="serve a model over SGLang's HTTP API (embedded engine)",
        description="Serve a Hugging Face model directory with the embedded engine behind SGLang's native /generate "
        "API subset.",
    )
    parser.add_argument(
        "--model",
        required=True,
        help="Hugging Face model directory, or a training run's directory or RUN_DIR/checkpoints/latest (its latest "
        "checkpoint's model)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    parser.add_argument("--port", type=int, default=30000, help="port (SGLang's default: 30000)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto")
    parser.add_argument("--max-batch-size", type=int, default=64, help="most sequences decoded together")
    parser.add_argument("--max-seq-len", type=int, default=4096, help="longest prompt + completion")
    parser.add_argument(
        "--prefix-cache-tokens",
        type=int,
        default=16384,
        help="tokens of finished requests' keys/values kept for prompts that extend them (0: off)",
    )
    parser.add_argument(
        "--no-prefix-sharing",
        action="store_true",
        help="recompute prompt heads that running requests share instead of copying them",
    )
    parser.add_argument(
        "--on-weight-update",
        choices=["finish_old", "abort"],
        default="finish_old",
        help="requests in flight at a weight update",
    )
    parser.add_argument("--seed", type=int, default=0, help="sampler seed")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.set_defaults(func=run)
