"""The real ``sglang-router`` as a test process: started in front of workers, ready once it sees them all.

Each router gets free ports for its HTTP server and its Prometheus exporter: the exporter's default port (29000)
is one per host, so two routers of two test workers at once made the second exit at start-up.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str) -> tuple[int, Any]:
    """(HTTP status, decoded JSON body or None) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


def start_router(workers: list[str], timeout_s: float = 90.0) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m sglang_router.launch_router`` over ``workers``; (process, URL) once every worker is healthy.
    Its log is shown when it exits or never becomes ready."""
    port = _free_port()
    cmd = [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--prometheus-port", str(_free_port()), "--prometheus-host", "127.0.0.1"]
    cmd += ["--worker-urls", *workers, "--health-check-interval-secs", "1", "--log-level", "warn"]
    log = tempfile.NamedTemporaryFile(prefix="sglang-router-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"sglang-router exited during start-up:\n{Path(log.name).read_text()[-3000:]}"
        try:
            status, body = get_json(url + "/readiness")
            if status == 200 and body.get("healthy_workers") == len(workers):
                return proc, url
        except OSError:
            pass
        time.sleep(0.3)
    stop_router(proc)
    raise AssertionError(
        f"sglang-router did not see its workers within {timeout_s:.0f} s:\n{Path(log.name).read_text()}"
    )


def stop_router(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 20 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
