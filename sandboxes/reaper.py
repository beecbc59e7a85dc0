"""Crash-safe cleanup: remove sandbox containers whose owning process on this host is gone.

Every container carries `agentrl.owner = host:pid:start-ticks`; a kill -9'd run leaves its containers
behind, and the next pool (or `reap_stale_containers()`) removes them without touching live runs.
"""

from __future__ import annotations

import socket
from typing import Any

import docker.errors

from sandboxes.docker_backend import LABEL, OWNER_LABEL, process_start_ticks

RUN_LABEL = "agentrl.run_id"


def owner_alive(owner: str) -> bool:
    """Whether the owner tag names a live process (True for other hosts: we cannot tell)."""
    host, _, rest = owner.partition(":")
    pid, _, ticks = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return host != socket.gethostname()
    return process_start_ticks(int(pid)) == ticks and ticks != ""


def reap_stale_containers(client: Any, *, run_id: str | None = None) -> list[str]:
    """Remove sandbox containers of dead owners (or all of `run_id`); returns the removed names."""
    filters = {"label": [f"{RUN_LABEL}={run_id}"] if run_id else [LABEL]}
    removed = []
    for container in client.containers.list(all=True, filters=filters):
        if run_id is None and owner_alive(container.labels.get(OWNER_LABEL, "")):
            continue
        try:
            container.remove(force=True)
            removed.append(container.name)
        except docker.errors.NotFound:
            pass  # another reaper got there first
    return removed
