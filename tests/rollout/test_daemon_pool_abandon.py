"""After ``abandon()`` the env thread pool starts a worker in place of the stuck one, also when the stuck worker
had just finished another call (it took the stuck call from the queue: it was counted idle, and no replacement
started)."""

from __future__ import annotations

import threading

from agentrl.rollout.env_threads import DaemonThreadPool

HANG_GUARD_S = 30.0  # not a speed bound: a call that never runs would otherwise hang the test


def test_a_replacement_starts_after_a_worker_that_took_a_queued_call_is_abandoned() -> None:
    release, started = threading.Event(), threading.Event()

    def stuck() -> str:
        started.set()
        release.wait()
        return "stuck"

    with DaemonThreadPool(1, thread_name_prefix="test-env") as pool:
        gate = threading.Event()
        first = pool.submit(gate.wait)  # the only worker is busy ...
        hung = pool.submit(stuck)  # ... so this call queues, and that worker takes it when the first returns
        gate.set()
        assert first.result(timeout=HANG_GUARD_S)
        assert started.wait(HANG_GUARD_S)
        pool.abandon()  # the worker is stuck in `stuck` for good
        after = pool.submit(lambda: "ran")
        try:
            assert after.result(timeout=HANG_GUARD_S) == "ran"
        finally:
            release.set()
        assert hung.result(timeout=HANG_GUARD_S) == "stuck"
