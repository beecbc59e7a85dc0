"""Gateway tests import their agent programs and helpers from this folder; the taught model is built once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def taught_model_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model taught ``gateway_agents.calc_agent``'s exchanges (see ``taught_model.py``)."""
    from taught_model import teach_calculator

    return teach_calculator(tiny_model_dir, tmp_path_factory.mktemp("taught-model"))
