"""The real sglang-router (PyPI ``sglang-router`` 0.3.2, its Rust binary) in front of two ``agentrl serve`` workers.

The router forwards /generate but has no /abort_request or weight-update routes (404), so the client aborts
and updates through the workers the router lists (GET /workers). Checked here: generation, partial-rollout
aborts at a step boundary, weight updates reaching every worker, and a worker killed mid-step.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from router_process import get_json, start_router, stop_router
from test_rollout_http import _free_port, _orchestrator, _serve

from agentrl.engines.base import SamplingParams
from agentrl.engines.sglang.config import SGLangEngineConfig
from agentrl.engines.sglang.http import SGLangEngine
from agentrl.errors import EngineError, RolloutError
from agentrl.rollout.buffer import RolloutBuffer

pytestmark = pytest.mark.slow


def _cluster(model_dir: Path) -> Iterator[dict[str, Any]]:
    procs: list[subprocess.Popen[bytes]] = []
    try:  # whatever started is stopped, also when a later start fails
        workers = []
        for _ in range(2):
            workers.append(_serve(model_dir))
            procs.append(workers[-1][0])
        router, url = start_router([w[1] for w in workers])
        procs.insert(0, router)
        yield {"router": url, "workers": workers}
    finally:
        for proc in procs:
            stop_router(proc)


@pytest.fixture(scope="module")
def cluster(tiny_model_dir: Path) -> Iterator[dict[str, Any]]:
    """Two agentrl serve workers behind a real sglang-router, shared by the tests that leave them running."""
    yield from _cluster(tiny_model_dir)


@pytest.fixture()
def doomed_cluster(tiny_model_dir: Path) -> Iterator[dict[str, Any]]:
    """A cluster of its own for the test that kills a worker."""
    yield from _cluster(tiny_model_dir)


# The kill test runs first: its cluster is gone before the shared one starts (two clusters would load 2 cores).


def _client(url: str, tmp_path: Path, **overrides: Any) -> SGLangEngine:
    return SGLangEngine(SGLangEngineConfig(urls=[url], weights_dir=str(tmp_path / "weights"), **overrides))


def test_worker_killed_mid_step(
    doomed_cluster: dict[str, Any], tiny_model_dir: Path, tiny_tokenizer: Any, tmp_path: Path
) -> None:
    """A worker SIGKILLed with requests in flight: the step either completes on the survivor or fails with a
    clear error; either way the buffer keeps its last boundary, and a weight update names the dead worker."""

    cluster = doomed_cluster

    async def scenario() -> tuple[str, int]:
        engine = _client(cluster["router"], tmp_path, max_retries=2, request_timeout_s=60)
        buffer = RolloutBuffer(tmp_path / "b.sqlite")
        orch = _orchestrator(engine, tiny_tokenizer, buffer, over_sample=1.0)
        await orch.collect_step(1)
        orch.commit_step(1)
        step = asyncio.create_task(orch.collect_step(2))
        while not any(r.request_id for g in orch._groups for r in g.runners):
            assert not step.done(), "step 2 ended before any request was sent"
            await asyncio.sleep(0.005)
        os.kill(cluster["workers"][0][0].pid, signal.SIGKILL)
        try:
            batch = await asyncio.wait_for(step, timeout=180)
            outcome = f"continued: {len(batch.groups)} groups, {len(batch.dropped)} dropped"
        except RolloutError as exc:
            outcome = f"failed: {exc}"
            assert "engine" in str(exc)
        last = buffer.last_step()
        with pytest.raises(EngineError, match=cluster["workers"][0][1].replace(".", r"\.")):
            await engine.update_weights(str(tiny_model_dir), version=2)  # the survivor loads it, the dead one cannot
        await orch.close()
        await engine.close()
        return outcome, last

    outcome, last = asyncio.run(scenario())
    print(outcome)
    assert last in (1, 2)  # step 1's boundary, or step 2's if it completed: never a half-written step


def test_router_lacks_abort_and_update_routes_and_lists_its_workers(cluster: dict[str, Any]) -> None:
    router = cluster["router"]
    for path in ("/abort_request", "/update_weights_from_disk", "/update_weights_from_tensor", "/pause_generation"):
        request = urllib.request.Request(router + path, data=b'{"abort_all": true}', method="POST")
        request.add_header("Content-Type", "application/json")
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(request, timeout=5)
        assert missing.value.code == 404, path  # the reason aborts and updates go to the workers
    status, body = get_json(router + "/workers")
    assert status == 200 and sorted(w["url"] for w in body["workers"]) == sorted(w[1] for w in cluster["workers"])


def test_generation_and_weight_updates_reach_every_worker(
    cluster: dict[str, Any], tiny_model_dir: Path, tmp_path: Path
) -> None:
    client = _client(cluster["router"], tmp_path)

    async def body() -> list[Any]:
        lines = await client.probe()
        params = SamplingParams(max_new_tokens=6, ignore_eos=True)
        before = await asyncio.gather(*(client.generate([1, 2, 3, i], params) for i in range(4)))
        await client.update_weights(str(tiny_model_dir), version=3)
        after = await asyncio.gather(*(client.generate([4, 5, i], params) for i in range(4)))
        await client.close()
        return [lines, before, after]

    lines, before, after = asyncio.run(body())
    assert any("sglang-router over 2 worker(s)" in line for line in lines)
    assert all(len(r.output_ids) == 6 and r.token_versions() == [0] * 6 for r in before)
    assert all(r.token_versions() == [3] * 6 for r in after)
    for _, worker in cluster["workers"]:
        assert get_json(worker + "/model_info")[1]["weight_version"] == "3"


def test_step_boundary_aborts_partial_rollouts_through_the_workers(
    cluster: dict[str, Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    """Over-sampled episodes still generating when the step fills are aborted (not waited for) and kept."""

    async def scenario() -> tuple[float, int]:
        engine = _client(cluster["router"], tmp_path, request_timeout_s=120)
        buffer = RolloutBuffer(tmp_path / "b.sqlite")
        orch = _orchestrator(engine, tiny_tokenizer, buffer)
        started = time.monotonic()
        batch = await orch.collect_step(1)
        elapsed = time.monotonic() - started
        partial = [e for g in buffer.load_groups(("inflight",)) for e in g.episodes if e.status == "partial"]
        assert len(batch.groups) == 2 and batch.metrics["rollout/groups_carried"] >= 1
        await orch.close()
        await engine.close()
        return elapsed, len(partial)

    elapsed, partial = asyncio.run(scenario())
    assert partial >= 1  # cut mid-episode and stored, resumable next step
    assert elapsed < 60
    for _, worker in cluster["workers"]:
        assert get_json(worker + "/server_info")[1]["internal_states"][0]["num_running_reqs"] == 0


def test_aborts_fail_loudly_when_no_worker_knows_the_route(tmp_path: Path) -> None:
    """A URL that is neither an SGLang server nor a router listing workers is refused at probe time."""
    from aiohttp import web

    async def scenario() -> None:
        app = web.Application()

        async def ok(request: web.Request) -> web.Response:
            return web.Response(text="OK")

        app.add_routes([web.get("/health", ok)])
        runner = web.AppRunner(app)
        await runner.setup()
        port = _free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        client = _client(f"http://127.0.0.1:{port}", tmp_path, max_retries=0)
        try:
            with pytest.raises(EngineError, match="aborts and weight updates could not reach"):
                await client.generate([1, 2], SamplingParams(max_new_tokens=2))
        finally:
            await client.close()
            await runner.cleanup()

    asyncio.run(scenario())
