"""Private uids for process sandboxes started as root: one uid per live sandbox, leased with an flock.

Why not one shared uid (65534, as containers use): RLIMIT_NPROC counts every task of the uid on the host, so
with a shared uid one sandbox's fork fails when another sandbox (or a container running as 65534) starts
processes after it measured its headroom; and sandboxes sharing a uid can signal each other's processes and
read each other's files. A uid of its own makes the process limit exact and the sandboxes strangers.

A lease is an exclusive ``flock`` on ``<lock_dir>/<uid>.lock``: the kernel drops it when the holder closes it
or dies (SIGKILL included), so a killed job never leaks a uid. A uid that still owns processes (left over
from a holder that died before its children did) is skipped rather than shared.
"""

from __future__ import annotations

import fcntl
import os
import stat
import weakref
from collections import Counter

from sandboxes.errors import SandboxStartError

LOCK_DIR = "/run/agentrl-sandbox-uids" if os.path.isdir("/run") else "/tmp/agentrl-sandbox-uids"


def process_owners() -> Counter[int]:
    """How many processes on this host run as each uid (RLIMIT_NPROC counts them against a new one)."""
    owners: Counter[int] = Counter()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                owners[os.stat(f"/proc/{entry}").st_uid] += 1
            except OSError:
                pass  # the process exited while we listed /proc
    return owners


def processes_of(uid: int) -> int:
    """How many processes on this host run as ``uid``."""
    return process_owners()[uid]


def _private_lock_dir(path: str) -> str:
    """The lock dir, created 0700 and checked to be root's real directory (a shared /tmp could hold a trap)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise SandboxStartError(
            f"the uid lock dir {path} is not a private directory of uid {os.geteuid()} (a link, another owner, "
            "or writable by others): remove it, or set ProcessSandboxConfig.run_as_uid to pin a uid"
        )
    return path


class UidLease:
    """An exclusive claim on one uid of ``[first, first + count)`` until ``release()`` or the holder's death."""

    def __init__(self, first: int, count: int, lock_dir: str = LOCK_DIR) -> None:
        directory = _private_lock_dir(lock_dir)
        busy = process_owners()
        # Lowest free uid first: the lock files stay as few as the most sandboxes ever alive at once (they are
        # never unlinked; unlinking a lock file races with a second opener), and a lost race costs one retry.
        for uid in range(first, first + count):
            fd = os.open(os.path.join(directory, f"{uid}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            if busy[uid]:
                os.close(fd)
                continue
            self.uid = uid
            # Closes the lock (once) on release() or when the lease is collected without one.
            self._close = weakref.finalize(self, os.close, fd)
            return
        raise SandboxStartError(
            f"all {count} private sandbox uids from {first} are in use or still own processes: close sandboxes, "
            "or raise ProcessSandboxConfig.private_uid_count"
        )

    def release(self) -> None:
        """Give the uid back; idempotent."""
        self._close()
