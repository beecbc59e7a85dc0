"""The ``agentrl`` command: an argparse frame whose subcommands live one per module in ``agentrl.cli``.

Each subcommand module exposes ``register(subparsers)`` and sets ``func`` via ``set_defaults``;
modules not written yet are skipped, so ``agentrl --help`` always works.
"""

from __future__ import annotations

import os

from agentrl.util.openmp_env import short_spin_unless_chosen

# Before torch loads OpenMP: a short spin, neither libgomp's long one (sandboxes sharing the cores starved) nor
# none (each matmul woke its team through the kernel); agentrl/util/openmp_env.py has the measurements.
os.environ.update(short_spin_unless_chosen(os.environ))

import argparse
import importlib
import sys
from collections.abc import Sequence

from agentrl import __version__
from agentrl.errors import AgentRLError
from agentrl.util.allocator import use_preferred_allocator

SUBCOMMAND_MODULES = ["envs_cmd", "make_model", "serve", "rollout", "inspect", "train", "eval"]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(prog="agentrl", description="Multi-turn agentic RL for LLMs.")
    parser.add_argument("--version", action="version", version=f"agentrl {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(f"agentrl.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"agentrl.cli.{name}":
                raise  # the module exists but one of its imports is missing: a real error
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; AgentRLErrors print as one clean message (exit code 2) instead of a traceback.

    Run as a command (``argv`` None), it first re-executes itself under TCMalloc where that is installed
    (``agentrl/util/allocator.py``; ``AGENTRL_ALLOCATOR=system`` keeps glibc's malloc).
    """
    if argv is None:
        try:
            use_preferred_allocator()
        except AgentRLError as exc:
            print(f"agentrl: error: {exc}", file=sys.stderr)
            return 2
    # Like `python -m`, find the user's modules (env.id: my_envs:MathQuiz) in the working directory;
    # appended, not prepended, so a file there never shadows an installed package.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    parser = build_parser()
    # Dotted overrides may follow options (`train CONFIG --dry-run trainer.lr=1e-5`): argparse leaves
    # such late positionals unparsed, so hand them to commands that take overrides, reject the rest.
    args, extras = parser.parse_known_args(argv)
    if extras:
        if hasattr(args, "overrides") and all("=" in extra and not extra.startswith("-") for extra in extras):
            args.overrides = [*(args.overrides or []), *extras]
        else:
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 1
    try:
        result = func(args)
    except AgentRLError as exc:
        print(f"agentrl: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("agentrl: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
