"""A minimal root for the process backend: the solution sees the interpreter, its stdlib and its own dirs.

Without it a process sandbox reads the host's filesystem: bundled task data, datasets installed next to
the interpreter, the source of a task generator. ``enter`` runs in the child between fork and exec: new
mount, IPC and (optionally) network namespaces (and a user namespace when not root, mapping only the
caller's own uid, so the child gets no capability over anything outside), then a fresh tmpfs root with

* ``/usr`` and the ``/bin``, ``/lib*`` it needs, plus the interpreter's own prefix, read-only, with every
  ``site-packages``/``dist-packages`` under them hidden behind an empty read-only tmpfs;
* ``/sandbox`` (the work dir), ``/tmp`` and ``/dev/shm``: fresh tmpfs mounts of the namespace, each with a size
  and an inode limit the kernel enforces (no write fills the host's disk, no tree of empty directories outgrows
  what a reset can erase in bounded time); they vanish with the namespace's last process. ``/dev/mqueue``, the
  harmless devices (null, zero, full, random, urandom), ``/proc``;

pivoted into, the old root detached, the new root read-only. The exec'd process runs as a uid other than 0
in its namespace, so it keeps no capability and cannot undo any of this. Where the kernel refuses a step
(e.g. ``unshare`` inside an unprivileged container), ``enter`` raises ``JailError`` naming the step.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import platform
import subprocess
from dataclasses import dataclass
from functools import lru_cache

from sandboxes.errors import SandboxStartError

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
# statvfs flag -> mount flag: a bind remount inside a user namespace must keep the flags the source has.
_LOCKED_FLAGS = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME}
_ST_RELATIME = 4096
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}.get(platform.machine(), 155)
WORKDIR, TMPDIR = "/sandbox", "/tmp"
DEVICES = ("null", "zero", "full", "random", "urandom")
_TOP_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/localtime")
_SITE_GLOBS = ("lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages")
_SITE_GLOBS += tuple("local/" + pattern for pattern in _SITE_GLOBS)
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: dlopen after fork in a threaded host could deadlock


class JailError(OSError):
    """A step of building the minimal root failed (the kernel refused a namespace or a mount)."""


@dataclass(frozen=True)
class JailPlan:
    """What the minimal root holds: read-only binds (same path inside), symlinks, and hidden package dirs."""

    binds: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    masks: tuple[str, ...]


@lru_cache(maxsize=8)
def plan_for(python: str) -> JailPlan:
    """The plan for interpreter ``python``: the system dirs plus its prefixes, every package dir hidden."""
    probe = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix]))"
    try:
        done = subprocess.run([python, "-I", "-S", "-c", probe], capture_output=True, text=True, timeout=60, check=True)
        prefixes = json.loads(done.stdout)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        raise SandboxStartError(
            f"the session server in {python} did not start: asking it for its prefixes failed ({exc}); set "
            "ProcessSandboxConfig.python to a Python 3 interpreter"
        ) from exc
    binds: list[str] = []
    links: list[tuple[str, str]] = []
    for name in _TOP_DIRS:
        path = "/" + name
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            binds.append(path)
    for prefix in prefixes:
        real = os.path.realpath(prefix)
        if real == "/":  # an interpreter installed at the root lives in /bin, /lib: binding "/" would show everything
            continue
        if not any(real == top or real.startswith(top + "/") for top in binds):
            binds.append(real)
    masks = sorted(
        {os.path.realpath(found) for top in binds for pattern in _SITE_GLOBS for found in glob.glob(f"{top}/{pattern}")}
    )
    binds += [path for path in _ETC_FILES if os.path.isfile(path)]
    return JailPlan(tuple(binds), tuple(links), tuple(path for path in masks if os.path.isdir(path)))


def _check(result: int, step: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise JailError(errno, f"{step}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda text: text.encode() if text is not None else None  # noqa: E731 - three uses, one line
    _check(_LIBC.mount(encode(source), target.encode(), encode(fstype), flags, encode(data)), f"mount {target}")


def _bind(source: str, target: str, *, readonly: bool) -> None:
    """Bind ``source`` at ``target`` (created), read-only if asked, keeping the source's locked mount flags."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    flags = os.statvfs(source).f_flag
    keep = sum(bit for st_bit, bit in _LOCKED_FLAGS.items() if flags & st_bit)
    keep |= MS_RELATIME if flags & _ST_RELATIME else 0
    keep |= MS_NODEV if os.path.isdir(source) else 0  # device nodes are bound one by one, as files
    _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_NOSUID | keep | (MS_RDONLY if readonly else 0))


def _map_own_ids(uid: int, gid: int) -> None:
    """In a new user namespace: map only our own uid and gid (no setgroups), so we own nothing else."""
    with open("/proc/self/setgroups", "w") as fh:
        fh.write("deny")
    for name, own in (("uid_map", uid), ("gid_map", gid)):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(f"{own} {own} 1")


@dataclass(frozen=True)
class JailSpec:
    """Where to build the root (an empty host dir) and what to bind into it."""

    plan: JailPlan
    mount_point: str  # empty host dir the new root's tmpfs is mounted on
    workdir_bytes: int  # size of the /sandbox tmpfs
    tmp_bytes: int  # size of /tmp and of /dev/shm
    max_inodes: int  # files and directories each of them may hold
    owner: int  # the uid the session will run as: it owns /sandbox
    new_network: bool


def enter(spec: JailSpec) -> None:
    """Unshare and pivot into the minimal root (in the child, before exec); JailError names a refused step."""
    root_uid, uid, gid = os.geteuid() == 0, os.geteuid(), os.getegid()  # read before: the new ns has none yet
    flags = CLONE_NEWNS | CLONE_NEWIPC | (CLONE_NEWNET if spec.new_network else 0)
    _check(_LIBC.unshare(flags | (0 if root_uid else CLONE_NEWUSER)), "unshare")
    if not root_uid:
        _map_own_ids(uid, gid)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the host
    new = spec.mount_point
    _mount("tmpfs", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path, target in spec.plan.links:
        os.symlink(target, new + path)
    for path in spec.plan.binds:
        _bind(path, new + path, readonly=True)
    for path in spec.plan.masks:
        _mount("tmpfs", new + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0755")
    os.makedirs(f"{new}/dev")
    for name in DEVICES:
        _bind("/dev/" + name, f"{new}/dev/{name}", readonly=False)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1")):
        os.symlink(target, f"{new}/dev/{name}")
    os.symlink("/proc/self/fd/2", f"{new}/dev/stderr")
    limits = f"nr_inodes={spec.max_inodes}"
    os.makedirs(f"{new}/dev/shm")
    _mount("tmpfs", f"{new}/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={spec.tmp_bytes},{limits},mode=1777")
    os.makedirs(f"{new}/dev/mqueue")
    _mount("mqueue", f"{new}/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.makedirs(f"{new}/proc")
    _mount("/proc", f"{new}/proc", None, MS_BIND | MS_REC)
    owner = f"mode=0700,uid={spec.owner},gid={spec.owner}"
    for path, size, mode in ((WORKDIR, spec.workdir_bytes, owner), (TMPDIR, spec.tmp_bytes, "mode=1777")):
        os.makedirs(new + path)
        _mount("tmpfs", new + path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},{limits},{mode}")
    _mount(None, new, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(new)
    _check(_LIBC.syscall(_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(_LIBC.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir(WORKDIR)
