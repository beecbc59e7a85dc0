#!/usr/bin/env python
"""Forwards to scripts/bench/bench_device.py: the device check keeps the path the project's briefs name."""

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    target = Path(__file__).resolve().parent / "bench" / "bench_device.py"
    sys.argv[0] = str(target)
    runpy.run_path(str(target), run_name="__main__")
