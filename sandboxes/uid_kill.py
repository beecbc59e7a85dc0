"""Ending every process of a process sandbox from the host, by its private uid, and proving none is left.

The session server inside the sandbox runs as the same uid as the code it supervises, so a kill it issues can
be dodged (a process that forks faster than the sweep, or one that stops the supervisor). The host does not
depend on it: a child of the trainer drops to the sandbox's uid and sends ``kill(-1, SIGKILL)``, which the
kernel delivers to every process that uid may signal in one pass over the task list (no fork can slip between
the pass's steps), then the host lists ``/proc`` and fails if any process of the uid is still running (a
zombie is dead: it only waits for its parent to collect it). Only for a uid leased to one sandbox: a shared
uid's other processes would die too.
"""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import time

from sandboxes.errors import SandboxLeftoverError

_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: dlopen in a forked child of a threaded host could deadlock
_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 311, "s390x": 280}.get(platform.machine(), 250)
KEYCTL_CLEAR = 7
# The keyrings that belong to a uid rather than to a namespace or a process: a later holder of the uid sees them.
UID_KEYRINGS = (-4, -5)  # KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING


def running_processes_of(uid: int) -> list[int]:
    """Pids of the processes of ``uid`` that are not zombies (dead, waiting to be collected)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue  # it exited while we looked
        if state not in (b"Z", b"X"):
            pids.append(int(entry))
    return pids


def _kill_as(uid: int) -> None:
    """Fork a child that becomes ``uid``, SIGKILLs every process that uid can signal (itself spared) and clears
    the uid's own keyrings (user and user-session), which outlive its processes."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: only async-signal-safe steps, then out
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
            for keyring in UID_KEYRINGS:  # no process of the uid is left to add a key back
                _LIBC.syscall(_SYS_KEYCTL, KEYCTL_CLEAR, keyring)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def kill_uid(uid: int, rounds: int = 20) -> None:
    """SIGKILL every process of ``uid`` (root only) and check from ``/proc`` that none runs any more; raise
    SandboxLeftoverError naming the survivors when one still does after ``rounds`` passes."""
    if os.geteuid() != 0:
        raise SandboxLeftoverError(f"only root can kill the processes of uid {uid} from the host")
    left: list[int] = []
    for attempt in range(rounds):
        _kill_as(uid)
        left = running_processes_of(uid)
        if not left:
            return
        time.sleep(0.002 * (attempt + 1))  # SIGKILL is delivered; the tasks still unwind their exit
    raise SandboxLeftoverError(
        f"processes {left[:10]} of sandbox uid {uid} survived {rounds} rounds of kill(-1, SIGKILL) from the host: "
        "the uid is not leased again while they live; look for them with `ps -u {uid}`"
    )
