"""Tests that run SGLang 0.5.23's own code (its argument parser, its tensor deserializer) on our output."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # --import-mode=importlib: make helpers importable
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "rollout"))  # the rollout tests' envs (live tier)
