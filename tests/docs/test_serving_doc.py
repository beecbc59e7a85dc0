"""docs/running-a-job.md, "Serving a trained checkpoint": `agentrl serve --model RUN_DIR/checkpoints/latest` and
the documented `openai` client example, run as written (only the port differs), plain and streamed."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "running-a-job.md"


def section() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text[text.index("## Serving a trained checkpoint") :].split("\n## ", 1)[0]


def client_example() -> str:
    return re.findall(r"^```python\n(.*?)^```", section(), flags=re.DOTALL | re.MULTILINE)[0]


def fake_run(tiny_model_dir: Path, run: Path) -> None:
    """A run directory as training leaves it (the tiny model as its step-1 checkpoint's model)."""
    ckpt = run / "checkpoints" / "step_000001"
    shutil.copytree(tiny_model_dir, ckpt / "model")
    (ckpt / "trainer_state.json").write_text(json.dumps({"step": 1, "world_size": 1}))
    (run / "checkpoints" / "latest").write_text("step_000001\n")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(proc: subprocess.Popen[str], port: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return
        except OSError:
            assert time.monotonic() < deadline, "agentrl serve did not become healthy"
            time.sleep(0.5)


def run_example(port: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = client_example().replace("127.0.0.1:30000", f"127.0.0.1:{port}")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_documented_client_talks_to_the_latest_checkpoint_plain_and_streamed(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    assert "agentrl serve --model runs/quickstart-<timestamp>/checkpoints/latest --port 30000" in section()
    run = tmp_path / "run"
    fake_run(tiny_model_dir, run)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "agentrl", "serve", "--model", str(run / "checkpoints" / "latest")]
    proc = subprocess.Popen(
        [*command, "--port", str(port), "--device", "cpu", "--max-seq-len", "512"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_healthy(proc, port)
        done = run_example(port, tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]  # the example asserts the streamed reply is the plain one
        assert done.stdout  # the reply (a random tiny model greedily writes newlines)
    finally:
        proc.terminate()
        out = proc.communicate(timeout=60)[0]
    assert f"[serve] model directory: {run / 'checkpoints' / 'step_000001' / 'model'}" in out
