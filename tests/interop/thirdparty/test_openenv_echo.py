"""OpenEnv-v0 against the echo env that ``openenv init`` generates, served by uvicorn from the OpenEnv venv.

The generated server is used as written, except for what its own comment says to change for concurrent
sessions (``max_concurrent_envs=1``): training keeps several episodes in flight, and the adapter's error
for the full server says so. The echo env's reward is ``min(0.1 x message length, 1)``; it never ends an
episode (``done`` is always false) and defines no success, so no episode counts as solved.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

pytest.importorskip("websockets", reason="needs websockets: pip install 'agentrl[openenv]'")

from interop_harness import free_port, run_config, stop, train_two_steps, wait_http
from openenv_server import openenv_python
from thirdparty_env import component

from envs.interop.openenv_env import OpenEnvEnv
from envs.interop.openenv_wire import OpenEnvError

ECHO = {"action_field": "message", "observation_field": "echoed_message", "max_turns": 2}


@contextmanager
def serve(echo_dir: Path) -> Iterator[str]:
    """``uvicorn server.app:app`` in the generated env's folder, as its README says; yields the base URL."""
    port = free_port()
    cmd = [str(openenv_python()), "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=echo_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, timeout_s=120)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def echo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    generated = component("openenv-echo") / "echo_env"
    copy = tmp_path_factory.mktemp("openenv") / "echo_env"
    shutil.copytree(generated, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_the_generated_server_holds_one_session_and_the_error_says_what_to_raise(echo_dir: Path) -> None:
    assert "max_concurrent_envs=1," in (echo_dir / "server" / "app.py").read_text()
    with serve(echo_dir) as url:
        first, second = OpenEnvEnv(url=url, **ECHO), OpenEnvEnv(url=url, **ECHO)
        try:
            check_env(first, skip_render_check=True)
            messages, _ = first.reset(seed=0)
            assert messages == [{"role": "user", "content": "Echo Env environment ready!"}]
            observation, reward, terminated, truncated, info = first.step("hello world")
            assert observation == [{"role": "user", "content": "hello world"}]
            assert (reward, terminated, truncated, info["success"]) == (1.0, False, False, False)
            first.reset(seed=0)
            assert first.step("hi")[1:4] == (pytest.approx(0.2), False, False)
            assert first.step("hi again")[1:4] == (pytest.approx(0.8), False, True)  # max_turns: truncated
            with pytest.raises(OpenEnvError, match="max_concurrent_envs at least the episodes in flight"):
                second.reset(seed=0)
        finally:
            first.close()
            second.close()


@pytest.mark.slow
def test_trains_two_steps_against_the_echo_server(tiny_model_dir: Path, tmp_path: Path, echo_dir: Path) -> None:
    app = echo_dir / "server" / "app.py"
    app.write_text(app.read_text().replace("max_concurrent_envs=1,", "max_concurrent_envs=8,"))
    with serve(echo_dir) as url:
        env = {"id": "agentrl/OpenEnv-v0", "kwargs": {"url": url, **ECHO}}
        records = train_two_steps(run_config(tmp_path, tiny_model_dir, env), "openenv-echo")
    assert all(0.0 <= r["episode/reward_mean"] <= 2.0 for r in records)  # two turns, each rewarded up to 1
    assert all(r["episode/success_rate"] == 0.0 for r in records)  # the echo env defines no success
