"""``agentrl train CONFIG [overrides] [--dry-run]``: the RL loop; ``agentrl train --resume RUN_DIR`` continues one.

A run directory keeps its resolved config (``config.yaml``), so ``--resume RUN_DIR`` needs nothing
else; a CONFIG or overrides given with it must match that config, or name the changes with
``--accept-config-changes`` (``agentrl.trainer.resume``).

Several devices or hosts: ``torchrun --nproc-per-node N [--nnodes M --rdzv-backend c10d
--rdzv-endpoint HOST:PORT] -m agentrl.cli.train CONFIG`` trains data-parallel with FSDP2
(nccl on GPUs, gloo on CPU); rank 0 owns the engine (embedded, or the SGLang servers listed in
engine.urls, reached over HTTP from any node) and the rollouts, and broadcasts each batch.
SGLang servers must read ``engine.weights_dir`` (a shared filesystem) for weight sync.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrl.errors import ConfigError

if TYPE_CHECKING:
    from agentrl.job.run_config import RunConfig

ACCEPT_FLAG = "--accept-config-changes"  # agentrl.trainer.resume names it in its error (kept here: no torch import)


def register(subparsers: Any) -> None:
    """Add the ``train`` subcommand."""
    parser = subparsers.add_parser(
        "train", help="Train a policy with GSPO-token on an environment.", description=__doc__
    )
    add_arguments(parser)
    parser.set_defaults(func=run_command)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The train command's arguments (shared with ``python -m agentrl.cli.train``)."""
    parser.add_argument(
        "config", nargs="?", help="Run config YAML (see configs/); with --resume, optional (the run keeps its own)."
    )
    parser.add_argument("overrides", nargs="*", help="Dotted overrides, e.g. trainer.lr=1e-6 algorithm.loss=gspo.")
    parser.add_argument("--resume", metavar="RUN_DIR", help="Continue the run in RUN_DIR from its latest checkpoint.")
    parser.add_argument(
        ACCEPT_FLAG,
        dest="accept_config_changes",
        action="store_true",
        help="With --resume: continue with a CONFIG or overrides that differ from the run's saved config.",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="Check the config, model dir, engine servers and env sandboxes, then exit without training.",
    )


def _config_and_overrides(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """``agentrl train --resume RUN_DIR key=value``: argparse takes the first override for CONFIG; give it back."""
    config, overrides = args.config, list(args.overrides or [])
    if config is not None and "=" in config and not Path(config).is_file():
        return None, [config, *overrides]
    return config, overrides


def load_run_config(args: argparse.Namespace) -> RunConfig:
    """The config to train: CONFIG with overrides, or on ``--resume`` the run's own (``agentrl.trainer.resume``)."""
    from agentrl.job.loader import load_config
    from agentrl.trainer.resume import resume_config
    from agentrl.trainer.validate import check_resume

    config, overrides = _config_and_overrides(args)
    if args.resume:
        cfg = resume_config(Path(args.resume), config, overrides, accept_changes=args.accept_config_changes)
        check_resume(Path(args.resume), cfg, accept_changes=args.accept_config_changes)
        return cfg
    if config is None:
        raise ConfigError("agentrl train needs a CONFIG file (e.g. configs/tiny_debug.yaml), or --resume RUN_DIR")
    if args.accept_config_changes:
        raise ConfigError(f"{ACCEPT_FLAG} only applies with --resume RUN_DIR; remove it")
    from agentrl.cli.model_path import with_run_model

    return with_run_model(load_config(config, overrides), "train")  # every config problem, cross-field ones included


def run_command(args: argparse.Namespace) -> int:
    """Load and validate the config, then train (or stop after validation with --dry-run)."""
    from agentrl.trainer.loop import train

    cfg = load_run_config(args)
    config, _ = _config_and_overrides(args)
    shown = config or str(Path(args.resume) / "config.yaml")
    if args.dry_run:
        from agentrl.trainer.preflight import preflight

        print(f"[train] config {shown!r} is valid ({cfg.trainer.steps} steps, loss {cfg.algorithm.loss.kind})")
        for line in preflight(cfg):
            label = "" if line.startswith("warning:") else "ok: "
            print(f"[train] {label}{line}")
        print("[train] dry run passed: nothing was trained")
        return 0
    from agentrl.trainer.dry_run_checks import clip_risk_warnings

    for line in clip_risk_warnings(cfg):  # said before the model loads; the first step adds what it measured
        print(f"[train] {line}", flush=True)
    name = Path(config).stem if config else Path(args.resume).name
    run_dir = train(cfg, config_name=name, resume=args.resume)
    print(f"[train] run directory: {run_dir}", flush=True)
    return 0


def main() -> int:
    """``python -m agentrl.cli.train``: the entry point torchrun launches."""
    parser = argparse.ArgumentParser(prog="agentrl-train", description=__doc__)
    add_arguments(parser)
    return run_command(parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
