"""SandboxPool: N warm sandboxes handed out one caller at a time, reset on release, replaced when broken.

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

from sandboxes.base import Sandbox
from sandboxes.config import DockerSandboxConfig, ProcessSandboxConfig
from sandboxes.docker_backend import DockerSandbox, check_image, connect
from sandboxes.errors import SandboxConfigError, SandboxError, SandboxPoolError
from sandboxes.process_backend import ProcessSandbox
from sandboxes.reaper import RUN_LABEL, reap_stale_containers

log = logging.getLogger(__name__)


class SandboxPool:
    """Keeps `size` warm sandboxes of one config; acquire() blocks while all are in use."""

    def __init__(
        self, config: DockerSandboxConfig | ProcessSandboxConfig, size: int, *, run_id: str | None = None
    ) -> None:
        if not isinstance(size, int) or size < 1:
            raise SandboxConfigError(f"pool size must be an int >= 1, got {size!r}")
        self.config, self.size = config, size
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.replaced = 0
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
            with ThreadPoolExecutor(max_workers=min(size, 4)) as executor:
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
        """A free, reset sandbox; waits up to timeout_s (None: forever) while all are in use."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while not self._free:
                if self._closed or not self._all:
                    raise SandboxPoolError(f"sandbox pool {self.run_id} is closed or empty: create a new pool")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise SandboxPoolError(
                        f"no sandbox free within {timeout_s}s (pool size {self.size}): raise the pool size "
                        "or release sandboxes sooner"
                    )
                self._cond.wait(remaining)
            if self._closed:
                raise SandboxPoolError(f"sandbox pool {self.run_id} is closed: create a new pool")
            sandbox = self._free.pop()
            self._in_use.add(id(sandbox))
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
        for sandbox in to_close:
            sandbox.close()
        if self._client is not None and not self._in_use:
            reap_stale_containers(self._client, run_id=self.run_id)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
