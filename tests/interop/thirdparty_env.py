"""Where scripts/setup_thirdparty.sh put the third-party components: skip when absent, fail under CI=true."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from interop_harness import HERE

ROOT = HERE.parents[1]
THIRDPARTY = Path(os.environ.get("AGENTRL_THIRDPARTY", ROOT / ".venv-thirdparty"))


def component(name: str) -> Path:
    """The set-up folder of one component; absent: skip (fail under CI=true, where the set-up must have run)."""
    path = THIRDPARTY / name
    if not (path / ".done").is_file():
        message = f"third-party component {name!r} is not set up at {path}: run scripts/setup_thirdparty.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
