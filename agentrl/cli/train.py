"""``agentrl train CONFIG [overrides] [--resume RUN_DIR] [--dry-run]``: the whole RL loop.

Several devices or hosts: ``torchrun --nproc-per-node N [--nnodes M --rdzv-backend c10d
--rdzv-endpoint HOST:PORT] -m agentrl.cli.train CONFIG`` trains data-parallel with FSDP2
(nccl on GPUs, gloo on CPU); rank 0 owns the engine (embedded, or the SGLang servers listed in
engine.urls, reached over HTTP from any node) and the rollouts, and broadcasts each batch.
SGLang servers must read ``engine.weights_dir`` (a shared filesystem) for weight sync.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    """Add the ``train`` subcommand."""
    parser = subparsers.add_parser(
        "train", help="Train a policy with GSPO-token on an environment.", description=__doc__
    )
    add_arguments(parser)
    parser.set_defaults(func=run_command)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The train command's arguments (shared with ``python -m agentrl.cli.train``)."""
    parser.add_argument("config", help="Run config YAML (see configs/).")
    parser.add_argument("overrides", nargs="*", help="Dotted overrides, e.g. trainer.lr=1e-6 algorithm.loss=gspo.")
    parser.add_argument("--resume", metavar="RUN_DIR", help="Continue the run in RUN_DIR from its latest checkpoint.")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="Check the config, model dir, engine servers and env sandboxes, then exit without training.",
    )


def run_command(args: argparse.Namespace) -> int:
    """Load and validate the config, then train (or stop after validation with --dry-run)."""
    from agentrl.config.loader import load_config
    from agentrl.trainer.loop import train
    from agentrl.trainer.validate import check_resume

    cfg = load_config(args.config, args.overrides)  # every config problem, cross-field ones included
    if args.resume:
        check_resume(Path(args.resume), cfg)
    if args.dry_run:
        from agentrl.trainer.preflight import preflight

        print(f"[train] config {args.config!r} is valid ({cfg.trainer.steps} steps, loss {cfg.algorithm.loss.name})")
        for line in preflight(cfg):
            print(f"[train] ok: {line}")
        print("[train] dry run passed: nothing was trained")
        return 0
    run_dir = train(cfg, config_name=Path(args.config).stem, resume=args.resume)
    print(f"[train] run directory: {run_dir}", flush=True)
    return 0


def main() -> int:
    """``python -m agentrl.cli.train``: the entry point torchrun launches."""
    parser = argparse.ArgumentParser(prog="agentrl-train", description=__doc__)
    add_arguments(parser)
    return run_command(parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
