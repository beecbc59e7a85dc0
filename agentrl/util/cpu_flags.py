"""This CPU's feature flags, for kernels that need particular instructions (loading them elsewhere dies with SIGILL)."""

from __future__ import annotations

from pathlib import Path


def cpu_flags() -> set[str]:
    """The flags ``/proc/cpuinfo`` lists for this CPU (empty where it cannot be read, e.g. off Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())
