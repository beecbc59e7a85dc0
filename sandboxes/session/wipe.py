"""What reset() erases inside a sandbox: every place a cell could leave something for the next episode.

Two parts. The configured dirs (work dir, /tmp, extra tmpfs) are emptied. With ``private_fs`` (a Docker
container, or a process sandbox in its own mount and IPC namespaces, where everything writable belongs to
the sandbox) it goes further: every writable mount the kernel lists (``/dev/shm``, ``/dev/mqueue``, any
tmpfs the image or config added) loses whatever this uid created, and the System V IPC objects (shared
memory, message queues, semaphores) of the namespace are removed. Never with the host's filesystem in view:
there the same sweep would delete the user's own files. Stdlib only; shipped as source.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import stat

# Kernel views and pseudo filesystems: not storage a cell can leave data in (or not ours to sweep).
VIRTUAL_FS = {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "securityfs", "debugfs", "tracefs", "bpf", "pstore"}
IPC_RMID = 0
# /proc/sysvipc/<kind>, the call that removes one, and the column of its owner's uid.
SYSV_KINDS = (("shm", "shmctl", 7), ("msg", "msgctl", 7), ("sem", "semctl", 4))


def unlock_tree(path: str) -> None:
    """Give the owner rwx on every directory of the tree, so a cell's ``chmod 000`` cannot keep its contents."""
    for top, dirs, _ in os.walk(path):
        for name in dirs:
            full = os.path.join(top, name)
            if not os.path.islink(full):
                os.chmod(full, stat.S_IRWXU)


def remove_entry(path: str) -> None:
    """Delete a file, link or directory tree (one that vanished meanwhile is fine); failing raises (reset fails)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, stat.S_IRWXU)
            unlock_tree(path)
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def empty_dir(root: str) -> None:
    """Remove everything inside ``root`` (a configured writable dir)."""
    for name in os.listdir(root):
        remove_entry(os.path.join(root, name))


def writable_mounts() -> list[str]:
    """Mount points of read-write, non-virtual filesystems, from /proc/self/mountinfo (octal escapes decoded)."""
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, fstype = left.split(), right.split()[0]
            point = fields[4].encode().decode("unicode_escape")
            kernel_view = point.startswith(("/proc/", "/sys/")) or point in ("/proc", "/sys")
            if fstype in VIRTUAL_FS or kernel_view or "rw" not in fields[5].split(","):
                continue  # (Docker masks /proc/keys etc. with tmpfs, and cgroup v1 dirs are not ours)
            points.append(point)
    return points


def sweep_mount(point: str, uid: int, mounts: set[str]) -> None:
    """Remove what ``uid`` created anywhere under ``point`` (not crossing into other mounts, swept themselves)."""
    for top, dirs, files in os.walk(point):
        dirs[:] = [d for d in dirs if os.path.join(top, d) not in mounts]
        if not os.access(top, os.W_OK):
            continue  # nothing could have been created here
        for name in dirs + files:
            path = os.path.join(top, name)
            try:
                owner = os.lstat(path).st_uid
            except FileNotFoundError:
                continue
            if owner == uid:
                remove_entry(path)
                if name in dirs:
                    dirs.remove(name)


def remove_sysv_ipc(uid: int) -> None:
    """Remove the System V shared memory segments, message queues and semaphore sets owned by ``uid``."""
    libc = ctypes.CDLL(None, use_errno=True)
    for kind, call, uid_column in SYSV_KINDS:
        try:
            with open("/proc/sysvipc/" + kind) as fh:
                rows = [line.split() for line in fh.readlines()[1:]]
        except OSError:
            continue  # no System V IPC in this kernel
        for row in rows:
            ipc_id, owner = int(row[1]), int(row[uid_column])
            if owner == uid:
                if call == "semctl":
                    getattr(libc, call)(ipc_id, 0, IPC_RMID)
                else:
                    getattr(libc, call)(ipc_id, IPC_RMID, None)


def wipe(cfg: dict) -> None:
    """Erase what the last episode left: the configured dirs always, everything writable with ``private_fs``."""
    for root in cfg["wipe_dirs"]:
        empty_dir(root)
    if not cfg.get("private_fs"):
        return
    uid = os.getuid()
    points = writable_mounts()
    mounts = set(points)
    for point in points:
        try:
            is_dir = stat.S_ISDIR(os.stat(point).st_mode)
        except OSError:  # a mount point this uid cannot even look at holds nothing it wrote
            continue
        if is_dir:
            sweep_mount(point, uid, mounts)
    remove_sysv_ipc(uid)
