"""Engine test fixtures: embedded engines on the tiny model, and the same engine served over real HTTP.

``engine`` is parametrised: the EmbeddedEngine in process, and SGLangEngine talking to the embedded
engine behind ``agentrl serve``'s aiohttp app on 127.0.0.1 (a free port, a server thread of its own).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# pytest runs with --import-mode=importlib (no sys.path changes): make engine_harness importable
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_harness import ServedEngine, build_embedded

from agentrl.engines.embedded.engine import EmbeddedEngine
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.sglang.http import SGLangEngine


@pytest.fixture
def embedded(tiny_model_dir: Path) -> Iterator[EmbeddedEngine]:
    """A fresh EmbeddedEngine (closed after the test)."""
    engine = build_embedded(tiny_model_dir)
    yield engine
    asyncio.run(engine.close())


@pytest.fixture
def served(tiny_model_dir: Path) -> Iterator[ServedEngine]:
    """A fresh embedded engine behind agentrl serve's HTTP app on 127.0.0.1."""
    inner = build_embedded(tiny_model_dir)
    with ServedEngine(inner) as server:
        yield server
    asyncio.run(inner.close())


@pytest.fixture(params=["embedded", "http"])
def engine(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Iterator[Any]:
    """The same engine contract, in process and over SGLang's HTTP API (agentrl serve)."""
    inner = build_embedded(tiny_model_dir)
    if request.param == "embedded":
        yield inner
    else:
        with ServedEngine(inner) as served:
            yield SGLangEngine(SGLangEngineConfig(urls=[served.url], max_retries=1, request_timeout_s=60))
    asyncio.run(inner.close())
