"""Fixtures of the environment tests: sandbox settings per backend (Docker ones skip without an engine)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import envs  # noqa: F401 - registers the bundled environments

# Test modules import the exploit catalogue as ``reward_hacks``; pytest's importlib mode does not put this
# folder on sys.path by itself.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

BACKENDS = ["process", pytest.param("docker", marks=pytest.mark.docker)]


def sandbox_settings(kind: str) -> dict[str, Any]:
    """Settings for CodeExec's ``sandbox`` kwarg; skips the test when Docker is requested but unusable."""
    if kind == "docker":
        from sandboxes import docker_available

        if not docker_available():
            pytest.skip("no Docker engine with the sandbox image (run scripts/test.sh to set them up)")
    return {"kind": kind}


@pytest.fixture(params=BACKENDS)
def sandbox_kind(request: pytest.FixtureRequest) -> str:
    """Each sandbox backend in turn: process always, docker when an engine and the image exist."""
    sandbox_settings(request.param)
    return str(request.param)
