"""SandboxPool: warm sandboxes handed out one caller at a time, reset on release, replaced when broken.

A ``single_use`` pool never hands a sandbox out twice: a sandbox given back is removed (in the background) and
a fresh one is started ahead of demand to take its place, so nothing one caller's code left behind (a process,
a socket's state, a file) can reach the next caller, and no caller waits for a reset or a start while a fresh
one is ready.

A pool starts ``size`` sandboxes and grows, when every one is in use, up to ``max_size`` (default ``size``;
None: no bound), so an elastic pool (``size=0, max_size=None``) holds the most its callers ever used at once.
Thread-safe (rollouts call env.step from a thread pool); `acquire_async`/`release_async` wrap the same
calls for asyncio code. Docker containers carry the pool's run id; stale ones of dead processes are
reaped when a pool starts (and when any process starts its first sandbox, ``reaper.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from sandboxes.base import Sandbox
from sandboxes.config import DockerSandboxConfig, ProcessSandboxConfig
from sandboxes.docker_backend import DockerSandbox, check_image, connect
from sandboxes.errors import SandboxConfigError, SandboxPoolError
from sandboxes.process_backend import ProcessSandbox
from sandboxes.reaper import RUN_LABEL, reap_stale_containers

log = logging.getLogger(__name__)


class SandboxPool:
    """Keeps warm sandboxes of one config: `size` from the start, up to `max_size` when in demand; acquire()
    blocks while `max_size` are in use."""

    def __init__(
        self,
        config: DockerSandboxConfig | ProcessSandboxConfig,
        size: int,
        *,
        max_size: int | None | Literal["size"] = "size",
        run_id: str | None = None,
        single_use: bool = False,
        spare: int = 1,
        prepare: Callable[[Sandbox], object] | None = None,
    ) -> None:
        self.max_size = size if max_size == "size" else max_size
        if not isinstance(size, int) or size < 0 or (size == 0 and self.max_size is not None):
            raise SandboxConfigError(
                f"pool size must be an int >= 1 (or 0 with max_size=None, an elastic pool), got {size!r}"
            )
        if self.max_size is not None and (not isinstance(self.max_size, int) or self.max_size < size):
            raise SandboxConfigError(f"pool max_size must be None or an int >= size {size}, got {max_size!r}")
        self.config, self.size, self.single_use = config, size, single_use
        self.spare = spare if single_use else 0  # fresh ones kept starting or ready beyond those handed out
        self.prepare = prepare  # run on each sandbox started ahead of demand, before it is handed out
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.replaced = 0
        self.started = size  # sandboxes this pool started, replacements included
        self.handed_out = 0
        self._starting = 0  # sandboxes being started for an acquire (counted against max_size)
        self._refilling = 0  # fresh sandboxes a single-use pool is starting ahead of demand
        self._waiting = 0  # callers waiting for one of them
        self._free: deque[Sandbox] = deque()
        self._in_use: set[int] = set()
        self._all: list[Sandbox] = []
        self._cond = threading.Condition()
        self._closed = False
        self._client = None
        if isinstance(config, DockerSandboxConfig):
            self._client = connect(config)
            check_image(self._client, config.image)
            removed = reap_stale_containers(self._client)
            if removed:
                log.warning("removed %d sandbox containers left by crashed runs: %s", len(removed), removed)
        try:
            with ThreadPoolExecutor(max_workers=max(1, min(size, 4))) as executor:
                self._all = list(executor.map(lambda _: self._new_sandbox(), range(size)))
        except BaseException:
            self.close()
            raise
        self._free.extend(self._all)

    def _new_sandbox(self) -> Sandbox:
        if isinstance(self.config, DockerSandboxConfig):
            return DockerSandbox(self.config, client=self._client, labels={RUN_LABEL: self.run_id})
        return ProcessSandbox(self.config)

    def acquire(self, timeout_s: float | None = None) -> Sandbox:
        """A free, reset sandbox (a new one while the pool is below max_size); waits up to timeout_s (None:
        forever) while max_size are in use."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxPoolError(f"sandbox pool {self.run_id} is closed: create a new pool")
                if self._free:
                    sandbox = self._free.pop()
                    self._in_use.add(id(sandbox))
                    self.handed_out += 1
                    self._top_up()
                    return sandbox
                if self._refilling > self._waiting:  # a fresh one is on its way: no second cold start for it
                    self._waiting += 1
                    self._cond.wait(None if deadline is None else max(deadline - time.monotonic(), 0))
                    self._waiting -= 1
                    continue
                if self._may_grow():
                    self._starting += 1  # the slot is this caller's; the sandbox starts outside the lock
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise SandboxPoolError(
                        f"no sandbox free within {timeout_s}s (pool max_size {self.max_size}): raise the pool's "
                        "max_size or release sandboxes sooner"
                    )
                self._cond.wait(remaining)
        return self._grow()

    def _top_up(self) -> None:
        """(Under the lock.) Keep ``spare`` fresh sandboxes ready or starting beyond the callers waiting for one, so
        the next acquire of a single-use pool finds one without a start on its critical path."""
        ahead = len(self._free) + self._refilling - self._waiting
        while ahead < self.spare and self._may_grow():
            self._refilling += 1
            ahead += 1
            _in_background(self._refill)

    def _may_grow(self) -> bool:
        return self.max_size is None or len(self._all) + self._starting + self._refilling < self.max_size

    def _grow(self) -> Sandbox:
        """Start one more sandbox for the caller (its slot was reserved in acquire)."""
        try:
            sandbox = self._new_sandbox()
        except BaseException:
            with self._cond:
                self._starting -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._starting -= 1
            closed = self._closed
            if not closed:
                self._all.append(sandbox)
                self._in_use.add(id(sandbox))
                self.started += 1
                self.handed_out += 1
                self._top_up()
        if closed:  # never the pool's: removed here, outside the lock (a round trip to the engine)
            sandbox.close()
            raise SandboxPoolError(f"sandbox pool {self.run_id} was closed while a sandbox started")
        return sandbox

    def release(self, sandbox: Sandbox) -> None:
        """Give a sandbox back: reset it (replaced by a fresh one when the reset fails in any way), or, in a
        single-use pool, remove it and start a fresh one in its place, both in the background."""
        with self._cond:
            if id(sandbox) not in self._in_use:
                raise SandboxPoolError(f"{sandbox!r} was not acquired from pool {self.run_id}")
            if self.single_use:
                self._in_use.discard(id(sandbox))
                self._all.remove(sandbox)
                refill = not self._closed
                self._refilling += refill
        if self.single_use:
            _in_background(sandbox.close)
            if refill:
                _in_background(self._refill)
            return
        try:
            sandbox.reset()
        except Exception as exc:  # noqa: BLE001 - whatever the reset met, a dirty sandbox is never reused
            log.warning("sandbox %r failed to reset (%s: %s): replacing it", sandbox, type(exc).__name__, exc)
            if self._discard(sandbox):
                _in_background(self._refill)
            return
        with self._cond:
            self._in_use.discard(id(sandbox))
            if self._closed:
                sandbox.close()
            else:
                self._free.append(sandbox)
            self._cond.notify()

    def discard(self, sandbox: Sandbox) -> None:
        """Give back a sandbox that must not be reused (its owner saw it fail): it is removed and a fresh one is
        started in its place, in the background."""
        with self._cond:
            if id(sandbox) not in self._in_use:
                raise SandboxPoolError(f"{sandbox!r} was not acquired from pool {self.run_id}")
        if self._discard(sandbox):
            _in_background(self._refill)

    def _discard(self, broken: Sandbox) -> bool:
        """Take a sandbox that failed out of the pool and remove it (its failure to close is only logged); True
        when a fresh one is to be started in its place."""
        with self._cond:
            self._in_use.discard(id(broken))
            self._all.remove(broken)
            self.replaced += 1
            refill = not self._closed
            self._refilling += refill
            self._cond.notify()
        try:
            broken.close()
        except Exception as exc:  # noqa: BLE001 - it is out of the pool either way; its leftovers are reaped
            log.warning("could not close the broken sandbox %r: %s: %s", broken, type(exc).__name__, exc)
        return refill

    def _refill(self) -> None:
        """Start a fresh sandbox ahead of demand (its slot was counted in ``_refilling``); a failure is logged and
        the next acquire starts one itself."""
        fresh: Sandbox | None = None
        try:
            fresh = self._new_sandbox()
            if self.prepare is not None:  # e.g. a first service started and stopped: the first use is not slower
                self.prepare(fresh)
        except Exception as exc:  # noqa: BLE001 - a background start has no caller to raise to
            if fresh is not None:
                fresh.close()
                fresh = None
            log.log(
                logging.DEBUG if self._closed else logging.WARNING,  # closing (at exit): the engine removes it
                "pool %s could not start a fresh sandbox ahead of demand: %s: %s",
                self.run_id,
                type(exc).__name__,
                exc,
            )
        with self._cond:
            self._refilling -= 1
            closed = self._closed
            if fresh is not None and not closed:
                self._all.append(fresh)
                self._free.appendleft(fresh)
                self.started += 1
            self._cond.notify_all()
        if fresh is not None and closed:
            fresh.close()

    @contextlib.contextmanager
    def session(self, timeout_s: float | None = None) -> Iterator[Sandbox]:
        """`with pool.session() as sandbox:` acquire, then release (reset) on exit."""
        sandbox = self.acquire(timeout_s)
        try:
            yield sandbox
        finally:
            self.release(sandbox)

    async def acquire_async(self, timeout_s: float | None = None) -> Sandbox:
        """acquire() without blocking the event loop."""
        return await asyncio.to_thread(self.acquire, timeout_s)

    async def release_async(self, sandbox: Sandbox) -> None:
        """release() without blocking the event loop."""
        await asyncio.to_thread(self.release, sandbox)

    def close(self) -> None:
        """Close every sandbox (free ones now, in-use ones when released) and reap this run's leftovers."""
        with self._cond:
            self._closed = True
            to_close = [s for s in self._all if id(s) not in self._in_use]
            self._free.clear()
            self._cond.notify_all()
        _close_in_parallel(to_close)
        if self._client is not None and not self._in_use:
            reap_stale_containers(self._client, run_id=self.run_id)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_background_slots = threading.BoundedSemaphore(4)


def _in_background(job: Callable[[], object]) -> None:
    """Run ``job`` on a daemon thread, at most four at once (a container start or removal is a round trip to the
    engine); a failure is logged, never raised."""

    def run() -> None:
        with _background_slots:
            try:
                job()
            except Exception as exc:  # noqa: BLE001 - nobody waits for it: report and go on
                log.warning("sandbox pool background job failed: %s: %s", type(exc).__name__, exc)

    threading.Thread(target=run, daemon=True, name="sandbox-pool-bg").start()


def _close_in_parallel(sandboxes: list[Sandbox], threads: int = 4) -> None:
    """Close sandboxes a few at once (removing a container is a round trip to the engine). Plain threads, not an
    executor: a pool closed at interpreter exit runs after concurrent.futures stopped taking work."""
    workers = [
        threading.Thread(target=lambda part=sandboxes[i::threads]: [s.close() for s in part], daemon=True)
        for i in range(min(threads, len(sandboxes)))
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
