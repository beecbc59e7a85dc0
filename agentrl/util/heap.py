"""Returning freed heap memory to the OS, so a process's RSS follows what it holds, not what it once held.

glibc keeps freed blocks below its (dynamic, up to 32 MB) mmap threshold in its arenas, one arena per
thread that allocated: the trainer's freed activations (main thread) are not reused by the embedded
engine's KV buffers (engine thread), so without a trim a colocated job's RSS is the sum of both peaks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _libc() -> Any:
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


@lru_cache(maxsize=1)
def _process() -> Any:
    return ctypes.CDLL(None)  # every library the process has loaded, a preloaded TCMalloc included


def trim_heap() -> bool:
    """Free memory back to the OS: TCMalloc's free pages when it is the allocator (``agentrl/util/allocator.py``),
    then ``malloc_trim(0)`` on every glibc arena; False where there is neither (musl, macOS: nothing to do)."""
    release = getattr(_process(), "MallocExtension_ReleaseFreeMemory", None)
    if release is not None:
        release()
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is None:
        return release is not None
    trim(0)
    return True
