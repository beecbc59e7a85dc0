"""SandboxPool: warm hand-out, reset on release, replacement of broken sandboxes, bounded concurrency,
thread and asyncio use, and crash-safe cleanup of a kill -9'd run's containers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandboxes import DockerSandbox, DockerSandboxConfig, SandboxPool, SandboxPoolError, reap_stale_containers
from sandboxes.docker_backend import connect
from sandboxes.reaper import RUN_LABEL, labelled_containers

ConfigFactory = Callable[..., Any]  # the `config_for` fixture


ROOT = Path(__file__).resolve().parents[2]


def test_pool_hands_out_reset_sandboxes_and_bounds_concurrency(backend: str, config_for: ConfigFactory) -> None:
    with SandboxPool(config_for(backend), size=2) as pool:
        with pool.session() as first:
            first.run_python("secret = 1", 5)
            first.write_files({"left.txt": "x"})
            second = pool.acquire()
            with pytest.raises(SandboxPoolError, match="no sandbox free within"):
                pool.acquire(timeout_s=0.1)
            pool.release(second)
        for _ in range(2):
            with pool.session() as sandbox:
                assert "NameError" in sandbox.run_python("secret", 5).stderr
                assert sandbox.exec(["ls", "-A"], 5).stdout == ""


def test_pool_replaces_a_broken_sandbox(backend: str, config_for: ConfigFactory) -> None:
    with SandboxPool(config_for(backend), size=1) as pool:
        sandbox = pool.acquire()
        sandbox.close()  # broken from the pool's point of view: reset() fails
        pool.release(sandbox)
        assert pool.replaced == 1
        with pool.session() as fresh:
            assert fresh is not sandbox and fresh.run_python("print('ok')", 5).stdout == "ok\n"


def test_pool_is_thread_safe_and_async_friendly(backend: str, config_for: ConfigFactory) -> None:
    with SandboxPool(config_for(backend), size=2) as pool:
        results: list[str] = []

        def worker(n: int) -> None:
            for i in range(5):
                with pool.session(timeout_s=30) as sandbox:
                    results.append(sandbox.run_python(f"print({n * 10 + i})", 5).stdout)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(int(r) for r in results) == sorted(n * 10 + i for n in range(4) for i in range(5))

        async def episode(n: int) -> str:
            sandbox = await pool.acquire_async(timeout_s=30)
            try:
                return (await asyncio.to_thread(sandbox.run_python, f"print({n})", 5)).stdout
            finally:
                await pool.release_async(sandbox)

        async def main() -> list[str]:
            return await asyncio.gather(*(episode(n) for n in range(6)))

        assert asyncio.run(main()) == [f"{n}\n" for n in range(6)]
    with pytest.raises(SandboxPoolError, match="closed"):
        pool.acquire(timeout_s=0.1)


def _containers(run_id: str) -> list[dict[str, Any]]:
    client = connect(DockerSandboxConfig())
    return labelled_containers(client, f"{RUN_LABEL}={run_id}")


@pytest.mark.docker
def test_pool_close_removes_its_containers(config_for: ConfigFactory) -> None:
    pool = SandboxPool(config_for("docker"), size=2)
    assert len(_containers(pool.run_id)) == 2
    pool.close()
    assert _containers(pool.run_id) == []


@pytest.mark.docker
@pytest.mark.slow
def test_kill_9_then_next_pool_start_reaps_the_old_run(config_for: ConfigFactory) -> None:
    config = config_for("docker")  # skips (or fails under CI=true) before spawning anything without Docker
    run_id = f"crash{os.getpid()}"
    script = (
        "import sys, time\nfrom sandboxes import SandboxPool, DockerSandboxConfig\n"
        f"pool = SandboxPool(DockerSandboxConfig(), size=4, run_id={run_id!r})\n"
        "print('ready', flush=True)\ntime.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=ROOT, text=True)
    watchdog = threading.Timer(60, proc.kill)  # readline() must not hang the suite if the child does
    watchdog.start()
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        watchdog.cancel()
    assert len(_containers(run_id)) == 4  # the crashed run left its containers behind
    start = time.monotonic()
    with SandboxPool(config, size=1):
        assert _containers(run_id) == []
    assert time.monotonic() - start < 30


@pytest.mark.docker
def test_reaper_spares_containers_of_live_owners(config_for: ConfigFactory) -> None:
    with DockerSandbox(config_for("docker")) as sandbox:
        client = connect(sandbox.config)
        container = client.containers.get(sandbox.container_id)
        assert container.name not in reap_stale_containers(client)
        container.reload()
        assert container.status == "running"


def test_an_elastic_pool_grows_to_its_peak_and_hands_the_same_sandboxes_out_again(
    backend: str, config_for: ConfigFactory
) -> None:
    with SandboxPool(config_for(backend), 0, max_size=None) as pool:
        first = [pool.acquire() for _ in range(3)]
        first[0].run_python("import os; os.makedirs('/dev/shm/kept', exist_ok=True); secret = 1", 5)
        for sandbox in first:
            pool.release(sandbox)
        again = [pool.acquire() for _ in range(3)]
        assert pool.started == 3 and pool.handed_out == 6
        assert {id(s) for s in again} == {id(s) for s in first}
        for sandbox in again:
            assert "NameError" in sandbox.run_python("secret", 5).stderr
            assert "kept" not in sandbox.run_python("import os; print(os.listdir('/dev/shm'))", 5).stdout
        for sandbox in again:
            pool.release(sandbox)


def test_a_pool_grows_up_to_max_size_then_waits() -> None:
    from sandboxes import ProcessSandboxConfig, SandboxConfigError

    with SandboxPool(ProcessSandboxConfig(), 1, max_size=2) as pool:
        held = [pool.acquire(), pool.acquire()]
        assert pool.started == 2
        with pytest.raises(SandboxPoolError, match="no sandbox free within 0.1s .*max_size 2"):
            pool.acquire(timeout_s=0.1)
        for sandbox in held:
            pool.release(sandbox)
    with pytest.raises(SandboxConfigError, match="max_size must be None or an int >= size 2"):
        SandboxPool(ProcessSandboxConfig(), 2, max_size=1)
