"""Start the test OpenEnv servers (tests/interop/openenv_app.py) in the OpenEnv venv (scripts/setup_test_deps.sh).

The ``openenv`` package pins fastmcp<4 (so mcp<2) while verifiers pins mcp==2.0.0: the server runs in
its own venv and process, as it would in its own container in production.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from interop_harness import HERE, free_port, stop, wait_http

ROOT = HERE.parents[1]


def openenv_python() -> Path:
    """The OpenEnv venv's interpreter ($AGENTRL_OPENENV_PYTHON, else .venv-openenv); skips when absent."""
    python = Path(os.environ.get("AGENTRL_OPENENV_PYTHON", ROOT / ".venv-openenv" / "bin" / "python"))
    if not python.exists():
        pytest.skip(f"no OpenEnv venv at {python}: run scripts/setup_test_deps.sh (it makes .venv-openenv)")
    return python


@contextmanager
def openenv_server(app: str, markers: Path | None = None) -> Iterator[str]:
    """Serve ``openenv_app:<app>`` with uvicorn on a free loopback port; yields its base URL."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(HERE))
    if markers is not None:
        env["OPENENV_TEST_MARKERS"] = str(markers)
    cmd = [str(openenv_python()), "-m", "uvicorn", f"openenv_app:{app}", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout_s=120)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)
