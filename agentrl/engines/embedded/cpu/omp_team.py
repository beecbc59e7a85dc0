"""Run one small op on the calling thread alone: no OpenMP team to wake for a few microseconds of work.

Where the team sleeps between parallel regions (``OMP_WAIT_POLICY=PASSIVE``; under the ``agentrl`` command's
short spin, after about 15 µs idle) a region wakes it, a fixed cost per op whatever its size. Measured under
PASSIVE on a 2-core AVX512-BF16 EPYC with SGLang's CPU kernels: a fused residual-add + RMSNorm over 24 rows took
14.6 µs on two threads and 3.4 µs on one; decode attention for one row over 64 tokens 46 µs against 10. The
thresholds where two threads win again are in ``sglang.py`` (docs/results/memory-and-speed.md).

``omp_set_num_threads`` sets the team size of the calling thread only (OpenMP's per-thread ICV).
``torch.set_num_threads`` would also change torch's process-wide default, which threads started later copy,
and clear oneDNN's primitive cache, both of which the trainer shares.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import TypeVar

from agentrl.util.openmp_env import team_sleeps_at_once

Result = TypeVar("Result")


class OmpTeam:
    """The calling thread's OpenMP team size, lowered to one around a call (``alone``).

    ``alone`` just calls where the team spins between regions (``sleeps`` False; by default read from the wait
    policy the process started with): lowering it then only lets it fall asleep. Without an OpenMP runtime in the
    process (a torch built without it) it just calls too: there is no team to wake.
    """

    def __init__(self, sleeps: bool | None = None) -> None:
        self.sleeps = team_sleeps_at_once(os.environ) if sleeps is None else sleeps
        try:  # torch loads its libgomp globally: its symbols resolve from the process
            process = ctypes.CDLL(None)
        except (OSError, TypeError):  # a platform without dlopen(NULL) (Windows)
            process = None
        self._set = getattr(process, "omp_set_num_threads", None)
        self._get = getattr(process, "omp_get_max_threads", None)
        if self._set is not None:
            self._set.argtypes, self._set.restype = [ctypes.c_int], None

    @property
    def available(self) -> bool:
        """Whether this process has an OpenMP runtime whose team size ``alone`` can lower."""
        return self._set is not None and self._get is not None

    def alone(self, op: Callable[..., Result], *args: object) -> Result:
        """``op(*args)`` with this thread's parallel regions run by this thread alone; the team size is restored
        after, also when ``op`` raises."""
        if not self.sleeps or self._set is None or self._get is None:
            return op(*args)
        threads = self._get()
        if threads == 1:
            return op(*args)
        self._set(1)
        try:
            return op(*args)
        finally:
            self._set(threads)
