"""Harbor's separate verifier: what crosses from the agent's container to the verifier's (Harbor 0.26 semantics).

Harbor collects the agent's *artifacts* (``/logs/artifacts``, the conventional publish dir, plus the
task's ``artifacts = [...]`` paths) after the agent ends and re-creates each at its original path in
the verifier's fresh container; nothing else of the agent's container reaches the tests.
"""

from __future__ import annotations

import shlex
from typing import Any

CONVENTION_DIR = "/logs/artifacts"


def writable_roots(workdir: str) -> tuple[str, ...]:
    """Where a hardened sandbox (read-only root file system) can receive files: its tmpfs mounts."""
    return (workdir.rstrip("/") + "/", "/logs/", "/tmp/")


def collect_artifacts(box: Any, sources: tuple[str, ...], limit: int = 2000) -> dict[str, bytes]:
    """Every regular file under each artifact path in ``box`` (absolute path -> bytes); absent paths are skipped."""
    quoted = " ".join(shlex.quote(path) for path in (CONVENTION_DIR, *sources))
    listing = box.exec(["bash", "-c", f"find {quoted} -type f 2>/dev/null | head -n {limit}"], timeout_s=30)
    return {path: box.read_file(path) for path in listing.stdout.splitlines() if path.startswith("/")}
