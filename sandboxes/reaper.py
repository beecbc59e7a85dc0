"""Crash-safe cleanup: remove sandbox containers whose owning process on this host is gone.

Every container carries `agentrl.owner = host:pid:start-ticks`. A kill -9'd process never removes its
containers, so the first DockerSandbox a process starts on an engine (pool or not), and every pool
start, removes the containers of dead owners there, without touching those of live processes.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

import docker.errors
import requests

LABEL = "agentrl.sandbox"
OWNER_LABEL = "agentrl.owner"
RUN_LABEL = "agentrl.run_id"

log = logging.getLogger(__name__)
_reaped_engines: set[str] = set()
_reaped_lock = threading.Lock()


def process_start_ticks(pid: int) -> str:
    """The kernel start time of a process: with the pid, it identifies the process despite pid reuse."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def owner_tag(pid: int | None = None) -> str:
    """host:pid:start of the process that owns a container (the reaper checks it is still alive)."""
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{process_start_ticks(pid)}"


def owner_alive(owner: str) -> bool:
    """Whether the owner tag names a live process (True for other hosts: we cannot tell)."""
    host, _, rest = owner.partition(":")
    pid, _, ticks = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return host != socket.gethostname()
    return process_start_ticks(int(pid)) == ticks and ticks != ""


def labelled_containers(client: Any, label: str) -> list[dict[str, Any]]:
    """Containers (running or not) carrying `label` ("key" or "key=value"), as the engine's list summaries.

    One list call, no per-container inspect: docker-py's `containers.list` inspects each container it lists
    and raises NotFound when one is removed in between (another job's pool closing, another reaper), a race
    any process sharing the engine can cause. Summaries carry "Id", "Names", "Labels" and "State".
    """
    return list(client.api.containers(all=True, filters={"label": label}))


def reap_stale_containers(client: Any, *, run_id: str | None = None) -> list[str]:
    """Remove sandbox containers of dead owners (or all of `run_id`); returns the removed names."""
    removed = []
    for summary in labelled_containers(client, f"{RUN_LABEL}={run_id}" if run_id else LABEL):
        if run_id is None and owner_alive((summary.get("Labels") or {}).get(OWNER_LABEL, "")):
            continue
        if _remove_unless_taken(client, summary["Id"]):
            removed.append((summary.get("Names") or [summary["Id"]])[0].lstrip("/"))
    return removed


def _remove_unless_taken(client: Any, container_id: str) -> bool:
    """Force-remove a container; False when another remover (a reaper, a closing pool) has it or had it."""
    try:
        client.api.remove_container(container_id, force=True)
    except docker.errors.NotFound:
        return False  # already removed
    except docker.errors.APIError as exc:
        # the engine answers 409 "removal of container ... is already in progress" while another client removes it
        if exc.status_code == 409 and "already in progress" in str(exc.explanation or exc):
            return False
        raise
    return True


def reap_stale_once(client: Any, engine: str) -> list[str]:
    """``reap_stale_containers`` the first time this process uses ``engine`` (its URL); [] afterwards."""
    with _reaped_lock:  # sandboxes start concurrently from a thread pool: one of them reaps
        if engine in _reaped_engines:
            return []
        try:
            removed = reap_stale_containers(client)
        except (docker.errors.DockerException, requests.RequestException) as exc:
            # Housekeeping only: the sandbox being started does not depend on it; the next start retries.
            log.warning(
                "could not reap stale sandbox containers on %s (%s); remove them by label %s", engine, exc, LABEL
            )
            return []
        _reaped_engines.add(engine)
    if removed:
        log.warning("removed %d sandbox containers left by crashed processes: %s", len(removed), removed)
    return removed
