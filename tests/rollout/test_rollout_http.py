"""Rollouts over HTTP: the SGLang backend against a real ``agentrl serve`` subprocess on 127.0.0.1.

Partial episodes resume with identical prefixes after a weight update over the wire, and a
server killed mid-step is a clear error that leaves the buffer at its last boundary.
"""

from __future__ import annotations

import asyncio
import copy
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from rollout_test_envs import Scratchpad

from agentrl.config.sections import RolloutConfig
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.sglang.http import SGLangEngine
from agentrl.errors import RolloutError
from agentrl.rollout.buffer import RolloutBuffer
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.orchestrator import RolloutOrchestrator

LONG = {"long_tasks": ("task-1", "task-2"), "long_reply_tokens": 48, "reply_tokens": 4}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(model_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "agentrl.cli.main",
        "serve",
        "--model",
        str(model_dir),
        "--port",
        str(port),
        "--max-seq-len",
        "1024",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, "agentrl serve exited during start-up"
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as reply:
                if reply.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("agentrl serve did not become healthy within 120 s")


@pytest.fixture()
def server(tiny_model_dir: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A real ``agentrl serve`` process on a free loopback port."""
    proc, url = _serve(tiny_model_dir)
    yield proc, url
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _orchestrator(engine: Any, tokenizer: Any, buffer: RolloutBuffer, over_sample: float = 2.0) -> RolloutOrchestrator:
    cfg = RolloutConfig(
        group_size=2, prompts_per_step=2, max_new_tokens=64, max_episode_tokens=700, over_sample=over_sample
    )
    env = lambda: Scratchpad(num_tasks=4, **LONG)  # noqa: E731
    return RolloutOrchestrator(
        engine, env, tokenizer, cfg, dataset=TaskDataset.from_env(env(), epochs=1), buffer=buffer
    )


@pytest.mark.slow
def test_partial_rollouts_over_http_resume_after_a_weight_update(
    server: tuple[Any, str], tiny_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    state = {
        k: v + 0.05
        for k, v in AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict().items()
    }

    async def scenario() -> None:
        engine = SGLangEngine(SGLangEngineConfig(urls=[server[1]], weights_dir=str(tmp_path / "weights")))
        buffer = RolloutBuffer(tmp_path / "b.sqlite")
        orch = _orchestrator(engine, tiny_tokenizer, buffer)
        await orch.collect_step(1)
        orch.commit_step(1)
        stored = [copy.deepcopy(e) for g in buffer.load_groups(("inflight",)) for e in g.episodes]
        assert stored and any(e.turns and e.turns[-1].reward is None and e.turns[-1].num_tokens > 0 for e in stored)
        await engine.update_weights(state, version=1)
        batch = await orch.collect_step(2)
        finals = {e.episode_id: e for g in batch.groups for e in g}
        for before in stored:
            b, a = before.segment, finals[before.episode_id].segment
            n = len(b.completion_ids)
            assert (
                a.input_ids[: len(b.input_ids)] == b.input_ids
                and a.logprobs[:n] == b.logprobs
                and a.versions[:n] == b.versions
            )
            assert {v for v, m in zip(a.versions[n:], a.loss_mask[n:]) if m} == {1}
        await orch.close()
        await engine.close()

    asyncio.run(scenario())


@pytest.mark.slow
def test_server_killed_mid_step_is_a_clear_error(server: tuple[Any, str], tiny_tokenizer: Any, tmp_path: Path) -> None:
    async def scenario() -> None:
        engine = SGLangEngine(SGLangEngineConfig(urls=[server[1]], max_retries=0, request_timeout_s=30))
        buffer = RolloutBuffer(tmp_path / "b.sqlite")
        # No over-sampling: step 1 carries no ready group, so step 2 must generate (its own 2 tasks).
        orch = _orchestrator(engine, tiny_tokenizer, buffer, over_sample=1.0)
        await orch.collect_step(1)
        step = asyncio.create_task(orch.collect_step(2))
        while not any(r.request_id for g in orch._groups for r in g.runners):  # step 2 is generating
            assert not step.done(), "step 2 ended before any request was sent"
            await asyncio.sleep(0.005)
        os.kill(server[0].pid, signal.SIGKILL)  # the server dies with requests in flight
        with pytest.raises(RolloutError, match="engine"):
            await asyncio.wait_for(step, timeout=120)
        assert buffer.last_step() == 1  # step 1's boundary intact, nothing of step 2 written
        await orch.close()
        await engine.close()

    asyncio.run(scenario())
