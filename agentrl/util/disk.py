"""Durable publication on disk: fsync the data, rename it into place, fsync the directory that names it.

A rename is atomic, but without fsync a power loss can leave the new name pointing at a file whose
blocks never reached the disk (zero-length or garbage). The order that rules this out: write under a
temporary name, fsync every file and directory of it, rename, then fsync the parent directory so the
rename itself is durable. Checkpoints and the trajectory archive publish this way.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_path(path: str | Path) -> None:
    """fsync one file or directory (a directory fsync makes the names inside it durable)."""
    flags = os.O_RDONLY | (os.O_DIRECTORY if Path(path).is_dir() else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str | Path) -> None:
    """fsync every file under ``root``, then every directory bottom-up, ``root`` last."""
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            fsync_path(Path(dirpath) / name)
        fsync_path(dirpath)


def publish(tmp: str | Path, final: str | Path) -> None:
    """Rename the fully written ``tmp`` (file or directory tree) to ``final`` durably (see the module docstring)."""
    tmp, final = Path(tmp), Path(final)
    if tmp.is_dir():
        fsync_tree(tmp)
    else:
        fsync_path(tmp)
    os.replace(tmp, final)
    fsync_path(final.parent)


def write_text_durably(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically and durably (a temp file beside it, then ``publish``)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    publish(tmp, path)
