"""``agentrl envs``: list the registered multi-turn environments (id, turns, tools, summary).

A wide terminal gets a table; a narrow one (under ``TABLE_MIN_WIDTH`` columns, e.g. 80) gets one block per env,
the id whole on its own line and the rest wrapped beneath it, since five folded columns there split every id.
"""

from __future__ import annotations

import argparse
import shutil
import textwrap
from typing import Any

from rich.console import Console
from rich.table import Table

from agentrl.env.registry import EnvListing, list_envs

TABLE_MIN_WIDTH = 120


def _table(infos: list[EnvListing], width: int) -> None:
    table = Table(title=f"{len(infos)} registered agentrl environment(s)")
    for column in ("id", "max turns", "tools", "entry point", "summary"):
        table.add_column(column, overflow="fold")
    for info in infos:
        table.add_row(info.id, str(info.max_turns), ", ".join(info.tools) or "-", info.entry_point, info.summary)
    Console(width=width).print(table)


def blocks(infos: list[EnvListing], width: int) -> list[str]:
    """The narrow listing: per env its id, then indented lines wrapped to ``width``."""
    lines = [f"{len(infos)} registered agentrl environment(s)", ""]
    for info in infos:
        lines.append(info.id)
        facts = f"max turns {info.max_turns}; tools: {', '.join(info.tools) or '-'}; entry point {info.entry_point}"
        for text in (facts, info.summary):
            if text:
                lines += textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False)
        lines.append("")
    return lines


def run(args: argparse.Namespace) -> int:
    """Print the registered envs after importing ``--import`` modules."""
    infos = list_envs(args.import_modules or [])
    width = args.width or shutil.get_terminal_size().columns
    if width >= TABLE_MIN_WIDTH:
        _table(infos, width)
    else:
        print("\n".join(blocks(infos, width)))
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
    parser.add_argument(
        "--width",
        type=int,
        default=None,
        help=f"width in characters (default: the terminal's); under {TABLE_MIN_WIDTH}, one block per env",
    )
    parser.set_defaults(func=run)
