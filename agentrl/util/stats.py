"""Small-sample statistics shared by the trainer's reports and the benchmarks: Student-t 95 % intervals.

A t-interval (mean +- t_{0.975, n-1} s / sqrt(n)) rather than a bootstrap: with the 5-30 units these reports
have (seeds, held-out tasks) a percentile bootstrap under-covers, and the t-interval is exact for normal errors.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

# t_{0.975, df} for df = 1..30 (beyond: the normal 1.96 is within 4%).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131]
T975 += [2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t_interval(values: Sequence[float]) -> dict[str, Any]:
    """``{"n", "mean", "lo", "hi"}``: the mean and its 95 % t-interval (bounds None for fewer than two values)."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "lo": None, "hi": None}
    mean = statistics.fmean(values)
    if n < 2:
        return {"n": 1, "mean": mean, "lo": None, "hi": None}
    half = (T975[n - 2] if n - 1 <= len(T975) else 1.96) * statistics.stdev(values) / math.sqrt(n)
    return {"n": n, "mean": mean, "lo": mean - half, "hi": mean + half}
