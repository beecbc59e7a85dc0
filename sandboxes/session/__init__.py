"""The session server shipped into every sandbox, and server_source() that assembles it for `python3 -c`.

The three modules are importable on the host (for reading and linting) and concatenated, minus their
cross-imports, into one stdlib-only script inside the sandbox.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

_PARTS = ("process_tree.py", "worker.py", "server.py")
_STRIP = "# stripped when shipped"


@lru_cache(maxsize=1)
def server_source() -> str:
    """The session server as one script: process_tree + worker + server, host-only imports removed."""
    here = Path(__file__).parent
    text = "\n".join((here / name).read_text() for name in _PARTS)
    kept = (line for line in text.splitlines() if not line.rstrip().endswith(_STRIP))
    # One __future__ import at the top makes the annotations lazy, so the script runs on Python 3.9+.
    return "from __future__ import annotations\n" + "\n".join(kept) + "\n"
