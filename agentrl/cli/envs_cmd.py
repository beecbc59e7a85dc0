"""``agentrl envs``: list the registered multi-turn environments (id, turns, tools, summary)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from agentrl.env.registry import list_envs


def run(args: argparse.Namespace) -> int:
    """Print a table of registered envs after importing ``--import`` modules."""
    infos = list_envs(args.import_modules or [])
    table = Table(title=f"{len(infos)} registered agentrl environment(s)")
    for column in ("id", "max turns", "tools", "entry point", "summary"):
        table.add_column(column, overflow="fold")
    for info in infos:
        table.add_row(info.id, str(info.max_turns), ", ".join(info.tools) or "-", info.entry_point, info.summary)
    Console(width=args.width).print(table)
    return 0


def register(subparsers: Any) -> None:
    """Add the ``envs`` subcommand."""
    parser = subparsers.add_parser(
        "envs", help="list registered environments", description="List the registered multi-turn environments."
    )
    parser.add_argument(
        "--import",
        dest="import_modules",
        action="append",
        metavar="MODULE",
        help="your module to import so its envs register beside the bundled ones (repeatable)",
    )
    parser.add_argument("--width", type=int, default=None, help="table width in characters (default: the terminal's)")
    parser.set_defaults(func=run)
