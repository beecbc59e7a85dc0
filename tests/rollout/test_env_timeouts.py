"""An env whose step blocks or raises, with the embedded engine: ``env.step_timeout_s`` fails the episode (and the
drop alarm counts it), the loop says when it waits on an env for long, a blocked worker never holds the process
open, and an env that raises leaves its traceback on stderr and in the run directory."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from buggy_envs import StepBlocks, StepRaises

from agentrl.config.sections import RolloutConfig
from agentrl.errors import RolloutError
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.env_threads import DaemonThreadPool, EnvTimeoutError, wait_env_call
from agentrl.rollout.orchestrator import RolloutOrchestrator
from agentrl.rollout.tracebacks import ENV_ERRORS_DIR, TracebackLog

HERE = Path(__file__).resolve().parent


def _cfg() -> RolloutConfig:
    return RolloutConfig(group_size=2, prompts_per_step=2, max_new_tokens=4, max_episode_tokens=256)


def _collect(make_engine: Callable[[], Any], tokenizer: Any, env: Any, **kwargs: Any) -> float:
    async def scenario() -> None:
        engine = make_engine()
        orch = RolloutOrchestrator(
            engine, env, tokenizer, _cfg(), dataset=TaskDataset.from_env(env(), seed=0), **kwargs
        )
        try:
            await asyncio.wait_for(orch.collect_step(1), 120)
        finally:
            await orch.close()
            await engine.close()

    started = time.monotonic()
    try:
        asyncio.run(scenario())
    finally:
        elapsed = time.monotonic() - started
    return elapsed


def test_a_blocking_step_fails_its_episode_after_the_timeout_and_trips_the_drop_alarm(
    make_engine: Callable[[], Any], tiny_tokenizer: Any
) -> None:
    with pytest.raises(RolloutError) as caught:
        _collect(make_engine, tiny_tokenizer, StepBlocks, step_timeout_s=1.0)
    message = str(caught.value)
    assert "groups were dropped this step" in message
    assert "StepBlocks.step (episode" in message and "did not return within env.step_timeout_s=1 s" in message


def test_the_wait_on_a_slow_env_call_is_announced_then_times_out() -> None:
    said: list[str] = []

    async def slow() -> str:
        await asyncio.sleep(10)
        return "late"

    async def scenario() -> None:
        await wait_env_call(slow(), "Slow.step", timeout_s=0.35, notice_s=0.1, say=said.append)

    with pytest.raises(EnvTimeoutError, match=r"Slow.step did not return within env.step_timeout_s=0.35 s"):
        asyncio.run(scenario())
    assert len(said) >= 2 and said[0].startswith("[rollout] still waiting for Slow.step after 0 s")
    assert "env.step_timeout_s=0.35 fails it" in said[0]


def test_a_worker_stuck_in_an_env_call_does_not_hold_the_process_open() -> None:
    """ThreadPoolExecutor joins its workers at exit: a stuck env step kept an aborted job alive."""
    script = textwrap.dedent("""
        import threading
        from agentrl.rollout.env_threads import DaemonThreadPool
        pool = DaemonThreadPool(2)
        pool.submit(threading.Event().wait)
        pool.shutdown(wait=False, cancel_futures=True)
        with DaemonThreadPool(1) as evaluation_pool:  # how agentrl.evaluation uses it: leaving never waits
            evaluation_pool.submit(threading.Event().wait)
        print("exiting", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "exiting" in done.stdout, done.stderr
    pool = DaemonThreadPool(1)
    assert pool.submit(lambda a, b=0: a + b, 2, b=3).result(timeout=10) == 5
    pool.shutdown()


def test_an_env_that_raises_leaves_its_traceback_in_the_run_directory_and_on_stderr(
    make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(RolloutError) as caught:
        _collect(make_engine, tiny_tokenizer, StepRaises, tracebacks=TracebackLog(tmp_path, keep_last=2))
    files = sorted((tmp_path / ENV_ERRORS_DIR).glob("*.txt"))
    assert len(files) == 2  # the last two kept
    text = files[-1].read_text()
    assert 'buggy_envs.py", line' in text and "in step" in text and "KeyError: 'answer'" in text
    assert f"(traceback: {tmp_path / ENV_ERRORS_DIR}" in str(caught.value)
    err = capsys.readouterr().err
    assert err.count("[rollout] an env raised (kept in") == 1 and 'buggy_envs.py", line' in err
