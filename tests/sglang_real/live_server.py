"""Real SGLang 0.5.23 servers on CPU for the live tier: ``python -m sglang.launch_server --device cpu`` from
``.venv-sglang`` (made by scripts/setup_sglang.sh; docs/engines.md#sglangs-cpu-kernel-wheel), on a tiny llama model.

Launching is slow (~40 s, more on a loaded machine), so test modules share servers through module fixtures.
Without the venv the tier skips, except under CI=true, where it fails: the tier must run in CI.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-sglang"
PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".agentrl-sglang-installed"
START_TIMEOUT_S = 420.0


def require_live_sglang() -> Path:
    """The venv's python. Without the venv: a skip naming why (scripts/setup_sglang.sh records it), but a failure
    under CI=true unless the reason is the CPU (no AVX-512: setup_sglang.sh marks it) or
    AGENTRL_REQUIRE_SGLANG_REAL=0 says this CI machine cannot run the real server."""
    if not STAMP.is_file():
        why = VENV / ".agentrl-sglang-unavailable"
        reason = why.read_text().strip() if why.is_file() else "run bash scripts/setup_sglang.sh"
        message = f"SGLang's real CPU server is not installed ({VENV}): {reason}"
        hardware = (VENV / ".agentrl-sglang-unavailable-hardware").is_file()  # a CPU without AVX-512: no fix here
        required = os.environ.get("AGENTRL_REQUIRE_SGLANG_REAL", "1") != "0"
        if os.environ.get("CI") == "true" and required and not hardware:
            pytest.fail(message + " (CI=true: the real-SGLang tier must run)")
        pytest.skip(message)
    return PYTHON


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str, timeout_s: float = 5.0) -> tuple[int, Any]:
    """GET ``url``: (status, parsed JSON body or None)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


def scheduler_gauges(url: str) -> dict[str, float]:
    """The real server's scheduler gauges from its Prometheus ``/metrics`` (``--enable-metrics``), e.g.
    ``num_running_reqs`` and ``num_queue_reqs``. ``/server_info`` does not report them: its ``internal_states``
    are the server's arguments (what ``agentrl serve`` adds there is its own)."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as reply:
        text = reply.read().decode()
    gauges: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("sglang:") and "{" in line:
            name, value = line.partition("{")[0], line.rsplit(" ", 1)[-1]
            gauges[name.removeprefix("sglang:")] = float(value)
    assert "num_running_reqs" in gauges, f"no sglang:num_running_reqs in {url}/metrics (--enable-metrics?)"
    return gauges


def post(url: str, body: dict[str, Any], timeout_s: float = 60.0) -> tuple[int, bytes]:
    """POST JSON to ``url``: (status, raw body), so non-JSON replies stay visible."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class LiveServer:
    """One ``sglang.launch_server`` process (its own process group, log in ``log``)."""

    def __init__(self, model_dir: Path, log: Path, *, dtype: str = "float32", port: int | None = None, **flags: Any):
        self.model_dir, self.log, self.dtype = model_dir, log, dtype
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.flags = flags
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """scripts/launch_sglang_cpu.sh (the documented launch: docs/engines.md#run-here-cpu)."""
        require_live_sglang()
        cmd = ["bash", str(ROOT / "scripts" / "launch_sglang_cpu.sh"), str(self.model_dir), str(self.port)]
        cmd += ["--enable-metrics"]  # /metrics: the only place the real server reports its running requests
        for name, value in self.flags.items():
            flag = "--" + name.replace("_", "-")
            cmd += [flag] if value is True else [flag, str(value)]
        return cmd

    def start(self) -> LiveServer:
        env = {**os.environ, "DTYPE": self.dtype, "OMP_NUM_THREADS": "1"}
        env.pop("SGLANG_RETURN_ORIGINAL_LOGPROB", None)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"sglang.launch_server exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                if get_json(self.url + "/health", 2)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.5)
        self.stop()
        raise AssertionError(f"sglang.launch_server not healthy within {START_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.is_file() else ""

    def kill(self) -> None:
        """SIGKILL the whole process group (the server's scheduler and detokenizer are children)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL after 20 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()
        try:  # the children, should the leader have gone first
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def live_servers(model_dir: Path, log_dir: Path, count: int = 1, **flags: Any) -> Iterator[list[LiveServer]]:
    """Start ``count`` servers one after the other (two at once would fight over 2 cores); stop them all."""
    servers: list[LiveServer] = []
    try:
        for i in range(count):
            servers.append(LiveServer(model_dir, log_dir / f"sglang-{i}.log", **flags))
            servers[-1].start()
        yield servers
    finally:
        for server in servers:
            server.stop()


def make_llama_model(out: Path) -> Path:
    """The suite's tiny model with SmolLM2's (llama) architecture, float32, saved in Hugging Face format."""
    from agentrl.models.tiny import make_tiny_model

    return make_tiny_model(out, architecture="llama")
