"""Helpers of the interop tests: free ports, starting and stopping servers, a 2-step tiny-model training run."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    """A TCP port nobody listens on right now (loopback)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """Wait until ``url`` answers any HTTP status (the server is up); fail if the process died."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
            pytest.fail(f"server exited with {proc.returncode} before answering {url}:\n{out[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=1.0)
            return
        except urllib.error.HTTPError:
            return  # any status means the server answers
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"server did not answer {url} within {timeout_s} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a server process this test started (and reap it)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def run_config(tmp_path: Path, model_dir: Path, env: dict[str, Any], **sections: dict[str, Any]) -> Path:
    """Write a small run config (tiny model, embedded engine, 2 steps) for ``env`` and return its path."""
    data: dict[str, Any] = {
        "model": {"path": str(model_dir), "device": "cpu"},
        "engine": {"kind": "embedded", "max_batch_size": 16, "max_seq_len": 1024},
        "env": env,
        "rollout": {
            "group_size": 2,
            "prompts_per_step": 2,
            "partial_rollout": False,
            "max_new_tokens": 24,
            "max_episode_tokens": 900,
        },
        "algorithm": {"loss": "gspo_token"},
        "trainer": {"steps": 2, "lr": 1e-3, "mini_batches": 1, "checkpoint_every_steps": 2},
        "logging": {"run_root": str(tmp_path / "runs"), "wandb_mode": "disabled", "progress": False},
    }
    for name, values in sections.items():
        data[name].update(values)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def train_two_steps(config_path: Path, name: str) -> list[dict[str, Any]]:
    """Train in-process with ``config_path``; returns the per-step metric records (asserts there are 2)."""
    from agentrl.job.loader import load_config
    from agentrl.trainer.loop import train

    run_dir = train(load_config(config_path, [f"logging.run_name={name}"]), config_name=name)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 2, records
    assert (run_dir / "checkpoints" / "step_000002" / "model" / "model.safetensors").exists()
    return records


def mcp_stdio_server() -> dict[str, Any]:
    """The MCP server config of the test tool server, as a stdio subprocess."""
    return {"transport": "stdio", "command": [sys.executable, str(HERE / "mcp_server.py")]}
