"""Env calls on worker threads that can be given up on: a step timeout, a notice while waiting, an exit that
never waits for a stuck env.

An env's ``step`` is user code that may block for ever (a read from stdin, a lock, a dead service).
Python cannot stop a thread, so a call that exceeds ``env.step_timeout_s`` is *abandoned*: the episode
fails with ``EnvTimeoutError``, the env is never handed out again, and the thread is a daemon so it
cannot hold the process open at exit (``concurrent.futures.ThreadPoolExecutor`` joins its threads
at interpreter exit, which is how a blocked step kept an aborted job alive).
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from agentrl.errors import RolloutError

T = TypeVar("T")

SLOW_ENV_NOTICE_S = 30.0  # how long the loop waits on one env call before saying so (then every as long again)


class EnvTimeoutError(RolloutError):
    """An env call did not return within ``env.step_timeout_s``; its episode failed and the env was abandoned."""


class DaemonThreadPool(Executor):
    """A thread pool whose workers are daemon threads, so a call stuck in user code never blocks the exit.

    ``abandon()`` tells the pool one worker is stuck for good: the pool may start another in its place.
    """

    def __init__(self, max_workers: int, thread_name_prefix: str = "agentrl-env") -> None:
        self._max, self._prefix = max_workers, thread_name_prefix
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._threads: list[threading.Thread] = []
        # Workers blocked waiting for a call, and calls queued that no worker took yet. A worker that finishes a
        # call and takes a queued one stays busy, so "idle" is counted at the queue, not when a call returns.
        self._idle = 0
        self._queued = 0
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` on a worker; a new worker starts when none is idle and the cap allows."""
        if kwargs:
            return self.submit(lambda: fn(*args, **kwargs))
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new env calls after the env thread pool shut down")
            self._queue.put((future, fn, args))
            self._queued += 1
            if self._queued > self._idle and len(self._threads) < self._max:
                thread = threading.Thread(target=self._work, name=f"{self._prefix}_{len(self._threads)}", daemon=True)
                thread.start()
                self._threads.append(thread)
        return future

    def __exit__(self, *exc_info: object) -> None:
        """Leaving a ``with`` block never waits for a stuck call (its caller has awaited what it needs)."""
        self.shutdown(wait=False, cancel_futures=True)

    def abandon(self) -> None:
        """One worker is stuck in a call that will never be waited for: allow one more worker."""
        with self._lock:
            self._max += 1

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            item = self._queue.get()
            with self._lock:
                self._idle -= 1
                self._queued -= item is not None
            if item is None:
                return
            future, fn, args = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # handed to the waiter, like ThreadPoolExecutor does
                    future.set_exception(exc)
            del item, future, fn, args

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking calls; ``cancel_futures`` drops queued ones; ``wait`` joins the workers (stuck ones too)."""
        with self._lock:
            self._closed = True
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
                    with self._lock:
                        self._queued -= 1
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


async def wait_env_call(
    call: Awaitable[T],
    what: str,
    *,
    timeout_s: float | None,
    notice_s: float = SLOW_ENV_NOTICE_S,
    say: Callable[[str], None] | None = None,
) -> T:
    """Await an env call, saying so every ``notice_s`` while it runs; EnvTimeoutError past ``timeout_s``."""
    future = asyncio.ensure_future(call)
    started = time.perf_counter()
    while True:
        waited = time.perf_counter() - started
        wait = notice_s if timeout_s is None else max(0.0, min(notice_s - waited % notice_s, timeout_s - waited))
        done, _ = await asyncio.wait({future}, timeout=wait)
        if done:
            return future.result()
        waited = time.perf_counter() - started
        if timeout_s is not None and waited >= timeout_s:
            future.cancel()  # a thread cannot be stopped: the call is abandoned (see the module docstring)
            raise EnvTimeoutError(
                f"{what} did not return within env.step_timeout_s={timeout_s:g} s; the episode failed and its env "
                "was set aside. Find what the env waits on (input(), a lock, a service that does not answer), or "
                "raise env.step_timeout_s if such a call is expected to take this long"
            )
        limit = (
            f"env.step_timeout_s={timeout_s:g} fails it" if timeout_s else "set env.step_timeout_s to fail such a call"
        )
        (say or _stderr)(f"[rollout] still waiting for {what} after {waited:.0f} s; {limit}")


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
