"""The live vLLM CPU server tier: fixtures in ``vllm_server`` (importable by the tests, like sglang_real's helpers)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # --import-mode=importlib: make helpers importable

from vllm_server import vllm_model_dir, vllm_server  # noqa: F401  (session fixtures)
