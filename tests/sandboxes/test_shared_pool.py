"""Process-wide shared pools: one per purpose and settings, per process, closed at exit."""

from __future__ import annotations

import multiprocessing

from sandboxes import ProcessSandbox, ProcessSandboxConfig
from sandboxes.shared import close_shared_pools, shared_pool


def test_one_pool_per_purpose_and_settings() -> None:
    config = ProcessSandboxConfig()
    session = shared_pool(config, "session")
    assert shared_pool(ProcessSandboxConfig(), "session") is session
    assert shared_pool({"kind": "process"}, "session") is session  # a mapping is validated to the same settings
    assert shared_pool(config, "grading") is not session
    assert shared_pool(ProcessSandboxConfig(memory_bytes=2**29), "session") is not session


def test_auto_is_resolved_once_when_the_pool_is_made() -> None:
    pool = shared_pool({"kind": "auto", "docker": {"image": "no-such-image:0"}}, "session")
    assert isinstance(pool.config, ProcessSandboxConfig)  # no such image: the process backend
    sandbox = pool.acquire()
    try:
        assert isinstance(sandbox, ProcessSandbox)
    finally:
        pool.release(sandbox)


def _child_run_id(parent_run_id: str, answer: multiprocessing.Queue) -> None:
    answer.put(shared_pool(ProcessSandboxConfig(), "session").run_id != parent_run_id)


def test_a_forked_child_gets_its_own_pool() -> None:
    parent = shared_pool(ProcessSandboxConfig(), "session")
    context = multiprocessing.get_context("fork")
    answer = context.Queue()
    child = context.Process(target=_child_run_id, args=(parent.run_id, answer))
    child.start()
    child.join(30)
    assert child.exitcode == 0 and answer.get(timeout=5) is True


def test_closing_the_shared_pools_closes_their_free_sandboxes() -> None:
    pool = shared_pool(ProcessSandboxConfig(), "closing-test")
    sandbox = pool.acquire()
    pool.release(sandbox)
    close_shared_pools()
    assert sandbox._closed
    assert shared_pool(ProcessSandboxConfig(), "closing-test") is not pool  # a new one after close
