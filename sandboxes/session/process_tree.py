"""Process-tree plumbing of the in-sandbox session server: frames, rlimits, reaping, killing, capped capture.

Stdlib only (Python 3.9+): shipped as source into the sandbox by server_source().
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import struct
import time
from typing import Any

from sandboxes.session.fdwait import readable

PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
CHUNK = 65536
OOM_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")
REAPED: dict[int, int] = {}  # pid -> wait status of children collected by reap()


def read_exact(fd: int, n: int) -> bytes:
    """Exactly n bytes from a blocking fd, or EOFError."""
    buf = bytearray()  # not bytes: += on bytes is quadratic for a multi-MB write_files frame
    while len(buf) < n:
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("channel closed")
        buf += chunk
    return bytes(buf)


def read_frame(fd: int) -> Any:
    """One length-prefixed (4-byte big-endian) JSON frame."""
    (size,) = struct.unpack(">I", read_exact(fd, 4))
    return json.loads(read_exact(fd, size).decode("utf-8"))


def write_frame(fd: int, obj: Any) -> None:
    """Write one length-prefixed JSON frame."""
    data = json.dumps(obj).encode("utf-8")
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def apply_limits(cfg: dict[str, Any]) -> None:
    """Runs in every child before user code: rlimits (the process backend's main fence)."""
    try:  # if the memory limit is hit, the kernel's OOM killer should pick user code, not the supervisor
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        pass
    for name, value in cfg.get("rlimits", {}).items():
        limit = getattr(resource, name)
        hard = resource.getrlimit(limit)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (value, value))


def oom_kills() -> int | None:
    """The cgroup's OOM-kill counter (v2 or v1), or None where the sandbox cannot see it."""
    for path in OOM_FILES:
        try:
            with open(path) as fh:
                for line in fh:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except OSError:
            continue
    return None


def children_of(pid: int) -> list[int]:
    """Direct children via /proc/PID/task/*/children (cheap: no scan of every process on the host)."""
    kids: list[int] = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as fh:
                kids.extend(int(p) for p in fh.read().split())
    except OSError:
        pass
    return kids


def kill_descendants(keep: tuple[int, ...] = (), rounds: int = 50) -> bool:
    """SIGKILL every descendant of this supervisor except `keep`; orphans come back to us (subreaper). False when
    some were still there after ``rounds`` sweeps (a reset then fails, and the host replaces the sandbox)."""
    for _ in range(rounds):
        todo, found = children_of(os.getpid()), []
        while todo:
            pid = todo.pop()
            todo.extend(children_of(pid))
            if pid not in keep:
                found.append(pid)
        if not found:
            return True
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()
        time.sleep(0.001)
    return False


def strangers(keep: tuple[int, ...]) -> list[int]:
    """Running processes in this pid namespace other than pid 1, this one and ``keep``: in a container, where
    every process is the sandbox's, anything listed here escaped the kills."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (1, os.getpid(), *keep):
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as fh:
                state = fh.read().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def set_dumpable(on: bool) -> None:
    """Off: no process of the same uid may ptrace this one or read its memory (process_vm_readv, /proc/PID/mem)."""
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 1 if on else 0, 0, 0, 0)


def reap() -> None:
    """Collect every exited child (zombie orphans included); statuses are kept for wait_for()."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = status


def wait_for(pid: int, timeout_s: float) -> int | None:
    """The exit code of `pid` (minus the signal number if killed), or None if still running."""
    deadline = time.monotonic() + timeout_s
    while pid not in REAPED:
        reap()
        if pid in REAPED or time.monotonic() > deadline:
            break
        time.sleep(0.0005)
    status = REAPED.pop(pid, None)
    return None if status is None else os.waitstatus_to_exitcode(status)


class Capture:
    """Keeps the first `cap` bytes of a stream and drains (discards) the rest so writers never block."""

    def __init__(self, fd: int, cap: int) -> None:
        self.fd, self.cap, self.data, self.truncated = fd, cap, bytearray(), False

    def pump(self) -> bool:
        """Read what is available; False at EOF."""
        try:
            chunk = os.read(self.fd, CHUNK)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.truncated = True
        self.data += chunk[: max(room, 0)]
        return True

    def drain(self) -> None:
        """Read until the pipe is empty (writers may still hold it open)."""
        while self.pump():
            if not readable(self.fd, 0):
                return

    def text(self) -> str:
        """The kept bytes as text, with a marker when cut."""
        text = self.data.decode("utf-8", errors="replace")
        return text + ("\n[sandbox: output truncated at %d bytes]\n" % self.cap if self.truncated else "")


def new_pipe() -> tuple[int, int]:
    """A pipe whose read end is non-blocking (the supervisor polls it)."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    return r, w
