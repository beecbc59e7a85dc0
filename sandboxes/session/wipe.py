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
import stat

# Kernel views and pseudo filesystems: not storage a cell can leave data in (or not ours to sweep).
VIRTUAL_FS = {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "securityfs", "debugfs", "tracefs", "bpf", "pstore"}
IPC_RMID = 0
# /proc/sysvipc/<kind>, the call that removes one, and the column of its owner's uid.
SYSV_KINDS = (("shm", "shmctl", 7), ("msg", "msgctl", 7), ("sem", "semctl", 4))


O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(name: str, dir_fd: int | None) -> int:
    """Open a directory (never through a link), giving its owner rwx first if a cell's ``chmod 000`` locked it."""
    try:
        return os.open(name, O_DIR, dir_fd=dir_fd)
    except PermissionError:
        os.chmod(name, stat.S_IRWXU, dir_fd=dir_fd)
        return os.open(name, O_DIR, dir_fd=dir_fd)


def _empty_open_dir(fd: int) -> str | None:
    """Unlink every non-directory in the open directory ``fd``; the name of one subdirectory left, or None."""
    try:
        os.fchmod(fd, stat.S_IRWXU)  # unlinking needs write and search permission on the directory
    except PermissionError:
        pass  # not ours (root sweeping another's tree): its mode already lets root through
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                return entry.name
            try:
                os.unlink(entry.name, dir_fd=fd)
            except FileNotFoundError:
                pass
    return None


def remove_tree(name: str, parent_fd: int) -> None:
    """Delete directory ``name`` of ``parent_fd`` and everything under it, without recursion and with one
    descriptor open at a time: a tree of any depth (deeper than the interpreter's stack or PATH_MAX) goes."""
    fd = _open_dir(name, parent_fd)
    path = [name]  # the names from ``name`` down to the directory ``fd`` is open on
    try:
        while True:
            child = _empty_open_dir(fd)
            if child is not None:
                below = _open_dir(child, fd)
                os.close(fd)
                fd = below
                path.append(child)
                continue
            if len(path) == 1:
                break
            above = os.open("..", O_DIR, dir_fd=fd)  # nothing runs in the sandbox now: the tree holds still
            os.close(fd)
            fd = above
            os.rmdir(path.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def remove_entry(path: str) -> None:
    """Delete a file, link or directory tree (one that vanished meanwhile is fine); failing raises (reset fails)."""
    parent = os.open(os.path.dirname(path) or ".", O_DIR)
    try:
        name = os.path.basename(path)
        if stat.S_ISDIR(os.lstat(name, dir_fd=parent).st_mode):
            remove_tree(name, parent)
        else:
            os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    finally:
        os.close(parent)


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
    """Remove what ``uid`` created anywhere under ``point`` (not crossing into other mounts, swept themselves).

    Iterative: it descends only through directories ``uid`` did not make (the image's, shallow); a directory
    ``uid`` made goes whole, however deep, with ``remove_tree``.
    """
    todo = [point]
    while todo:
        top = todo.pop()
        try:
            entries = list(os.scandir(top))
        except FileNotFoundError:
            continue
        for entry in entries:
            if entry.path in mounts:
                continue  # another mount: swept on its own
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if info.st_uid == uid:
                remove_entry(entry.path)
            elif stat.S_ISDIR(info.st_mode):
                todo.append(entry.path)


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


def clear_uid_keyrings() -> None:
    """Empty this uid's user and user-session keyrings (they belong to the uid, not to a process or namespace); a
    key unlinked so is collected by the kernel within about a second (its description shows in /proc/keys until
    then). Where the kernel or a seccomp profile refuses ``keyctl`` (Docker's default), nothing can be there."""
    number = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 311, "s390x": 280}.get(os.uname().machine, 250)
    libc = ctypes.CDLL(None, use_errno=True)
    for keyring in (-4, -5):  # KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING
        libc.syscall(number, 7, keyring)  # KEYCTL_CLEAR


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
    clear_uid_keyrings()
