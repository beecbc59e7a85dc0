"""Sandbox fixtures: one warm sandbox per backend shared by the contract and adversarial suites.

Docker-marked tests are skipped when no engine is reachable, unless CI=true (then they fail), so CI
cannot silently skip them.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator

import pytest

from sandboxes import DockerSandboxConfig, ProcessSandboxConfig, Sandbox, make_sandbox
from sandboxes.docker_backend import check_image, connect
from sandboxes.errors import SandboxError

BACKENDS = ["process", pytest.param("docker", marks=pytest.mark.docker)]
_shared: dict[str, Sandbox] = {}


def require_docker() -> None:
    """Skip (or, under CI=true, fail) when the Docker engine or the sandbox image is missing."""
    try:
        check_image(connect(DockerSandboxConfig()), DockerSandboxConfig().image)
    except SandboxError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but Docker is not usable: {exc}")
        pytest.skip(f"no Docker engine/image: {exc}")


def _config_for(backend: str, **overrides: object) -> DockerSandboxConfig | ProcessSandboxConfig:
    """A config of the named backend with small, test-friendly limits."""
    if backend == "docker":
        require_docker()
        return DockerSandboxConfig(**overrides)  # type: ignore[arg-type]
    return ProcessSandboxConfig(**overrides)  # type: ignore[arg-type]


@pytest.fixture
def config_for() -> Callable[..., DockerSandboxConfig | ProcessSandboxConfig]:
    """`config_for(backend, **overrides)`: a config of that backend (docker ones skip/fail without Docker)."""
    return _config_for


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend name; the docker one is marked `docker`."""
    if request.param == "docker":
        require_docker()
    return str(request.param)


@pytest.fixture
def sandbox(backend: str) -> Iterator[Sandbox]:
    """A warm sandbox of `backend`, shared across tests and reset after each."""
    sb = _shared.get(backend)
    if sb is None or sb._closed:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "ProcessSandbox isolation", RuntimeWarning)
            sb = _shared[backend] = make_sandbox(_config_for(backend, max_output_bytes=4096))
    yield sb
    try:
        sb.reset()
    except SandboxError:
        sb.close()


def pytest_configure(config: pytest.Config) -> None:
    # Expected on every process-backend start; test_contract checks it is raised (once).
    config.addinivalue_line("filterwarnings", "ignore:ProcessSandbox isolation:RuntimeWarning")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    for sb in _shared.values():
        sb.close()
    _shared.clear()
