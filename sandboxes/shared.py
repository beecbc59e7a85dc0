"""Process-wide elastic pools: a sandbox one owner gave back starts the next owner's work warm.

Starting a Docker sandbox is a container start; dozens at once took seconds each (the main job's first step: its
36 episodes waited 238-310 s in all on env calls, against 9-31 s with the evaluation's sandboxes carried over,
docs/results/memory-and-speed.md). Owners that come and go (an
evaluation's envs, then a rollout's) take their sandboxes from one elastic ``SandboxPool`` per purpose and
settings, and give them back on close; each is reset on release (every process killed, every writable place
wiped: ``Sandbox.reset``), the same guarantee a sandbox gives between two episodes of one owner.

A pool for a purpose whose sandboxes must carry nothing from one owner to the next, not even what a reset cannot
reach (a process that hides from the kill, a socket's state in the kernel), is ``single_use``: every sandbox
given back is removed and a fresh one started ahead of demand in its place (``SandboxPool``).

Pools are per purpose so that a sandbox keeps one role for its life (an env's grading sandboxes only ever run
graded code), and per process (a forked child starts its own; its parent's containers are not its to reuse).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from sandboxes.base import Sandbox
from sandboxes.factory import AnySandboxConfig, parse_sandbox_config, resolve_backend
from sandboxes.pool import SandboxPool

_pools: dict[tuple[int, str, str], SandboxPool] = {}
_lock = threading.Lock()
_exit_hook_pid: int | None = None


def shared_pool(
    config: AnySandboxConfig | Mapping[str, Any],
    purpose: str,
    *,
    single_use: bool = False,
    prepare: Callable[[Sandbox], object] | None = None,
) -> SandboxPool:
    """This process's elastic pool for sandboxes of ``config`` used for ``purpose`` (e.g. "session", "grading").

    ``kind: auto`` is resolved once, when the pool is made. ``single_use``: never hand a sandbox out twice (it is
    part of the pool's key). Acquire with ``pool.acquire()`` and give back with ``pool.release(sandbox)``; the pool
    keeps as many as were ever in use at once, until the process exits. ``prepare`` (used when the pool is made)
    runs on each sandbox the pool starts ahead of demand, before it is handed out.
    """
    if isinstance(config, Mapping):
        config = parse_sandbox_config(config)
    key = (
        os.getpid(),
        purpose + ("/single-use" if single_use else ""),
        f"{type(config).__name__}:{config.model_dump_json()}",
    )
    with _lock:
        pool = _pools.get(key)
        if pool is None:
            _register_exit_hook()
            pool = _pools[key] = SandboxPool(
                resolve_backend(config), 0, max_size=None, single_use=single_use, prepare=prepare
            )
    return pool


def close_shared_pools() -> None:
    """Close this process's shared pools (their free sandboxes now, those in use when given back)."""
    with _lock:
        mine = [key for key in _pools if key[0] == os.getpid()]
        pools = [_pools.pop(key) for key in mine]
    for pool in pools:
        pool.close()


def _register_exit_hook() -> None:
    global _exit_hook_pid
    if _exit_hook_pid != os.getpid():
        atexit.register(close_shared_pools)
        _exit_hook_pid = os.getpid()
