"""agentrl.util.heap.trim_heap: memory a process freed in glibc's heap goes back to the OS (RSS drops)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Run in a fresh interpreter: the test's own heap (pytest, other tests' tensors) would blur the numbers.
PROBE = """
import torch
from agentrl.util.heap import trim_heap

def rss_mb():
    with open("/proc/self/status") as status:
        return int(next(x for x in status if x.startswith("VmRSS:")).split()[1]) / 1024

blocks = [torch.ones(16000) for _ in range(4000)]  # 64 KB each: below glibc's mmap threshold, so in the heap
pin = torch.ones(16000)  # allocated last, so the freed blocks are not at the top of the heap (no automatic trim)
held = rss_mb()
del blocks
freed = rss_mb()
glibc = trim_heap()
print(held, freed, rss_mb(), int(glibc))
"""


def test_trim_heap_returns_freed_blocks_to_the_os() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout.split()
    held, freed, trimmed, glibc = (float(x) for x in out)
    if not glibc or freed < held - 200:
        pytest.skip("not glibc: this malloc returns freed blocks by itself, trim_heap has nothing to do")
    assert trimmed < freed - 200  # about 250 MB of freed 64 KB blocks left the process
