"""SandboxPool: warm sandboxes handed out one caller at a time, reset on release, replaced when broken.

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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from sandboxes.base import Sandbox
from sandboxes.config import DockerSandboxConfig, ProcessSandboxConfig
from sandboxes.docker_backend import DockerSandbox, check_image, connect
from sandboxes.errors import SandboxConfigError, SandboxError, SandboxPoolError
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
    ) -> None:
        self.max_size = size if max_size == "size" else max_size
        if not isinstance(size, int) or size < 0 or (size == 0 and self.max_size is not None):
            raise SandboxConfigError(
                f"pool size must be an int >= 1 (or 0 with max_size=None, an elastic pool), got {size!r}"
            )
        if self.max_size is not None and (not isinstance(self.max_size, int) or self.max_size < size):
            raise SandboxConfigError(f"pool max_size must be None or an int >= size {size}, got {max_size!r}")
        self.config, self.size = config, size
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.replaced = 0
        self.started = size  # sandboxes this pool started, replacements included
        self.handed_out = 0
        self._starting = 0  # sandboxes being started for an acquire (counted against max_size)
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
                    return sandbox
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

    def _may_grow(self) -> bool:
        return self.max_size is None or len(self._all) + self._starting < self.max_size

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
        if closed:  # never the pool's: removed here, outside the lock (a round trip to the engine)
            sandbox.close()
            raise SandboxPoolError(f"sandbox pool {self.run_id} was closed while a sandbox started")
        return sandbox

    def release(self, sandbox: Sandbox) -> None:
        """Reset the sandbox and return it; a sandbox that fails to reset is replaced by a fresh one."""
        with self._cond:
            if id(sandbox) not in self._in_use:
                raise SandboxPoolError(f"{sandbox!r} was not acquired from pool {self.run_id}")
        try:
            sandbox.reset()
        except SandboxError as exc:
            log.warning("sandbox %r failed to reset (%s): replacing it", sandbox, exc)
            sandbox = self._replace(sandbox)
        with self._cond:
            self._in_use.discard(id(sandbox))
            if self._closed:
                sandbox.close()
            else:
                self._free.append(sandbox)
            self._cond.notify()

    def _replace(self, broken: Sandbox) -> Sandbox:
        broken.close()
        with self._cond:
            self._in_use.discard(id(broken))
            self._all.remove(broken)
        fresh = self._new_sandbox()
        with self._cond:
            self._all.append(fresh)
            self._in_use.add(id(fresh))
            self.replaced += 1
            self.started += 1
        return fresh

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
