"""ProcessSandbox: the session server as a local subprocess, for machines without a Docker engine.

Fences: rlimits (address space, processes, file size, CPU), its own sessions and process groups, a
minimal root of its own in new mount, IPC, network (and, when not root, user) namespaces (``jail.py``),
and (when started as root) an unprivileged uid. Where the kernel refuses the namespaces it runs on the
host's filesystem instead and says so in ``isolation_error`` (graders refuse such a sandbox). Isolation
is weaker than a container's, so it warns once.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import subprocess
import tempfile
import warnings
import weakref

from sandboxes.base import Sandbox
from sandboxes.channel import FrameChannel, SessionLostError, max_frame_bytes
from sandboxes.config import ProcessSandboxConfig
from sandboxes.docker_backend import SERVER_SOURCE
from sandboxes.errors import SandboxLeftoverError, SandboxStartError, SandboxUnavailableError
from sandboxes.jail import TMPDIR, WORKDIR, JailSpec, enter, plan_for
from sandboxes.session.wipe import empty_dir
from sandboxes.uid_kill import kill_uid, running_processes_of
from sandboxes.uid_lease import UidLease, processes_of

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# Loaded once here: dlopen between fork and exec (in preexec_fn) could deadlock in a threaded host.
_LIBC = ctypes.CDLL(None, use_errno=True)
_warned = False
log = logging.getLogger(__name__)


def _tracer_of(pid: int) -> int:
    """The pid tracing ``pid`` (0: none, or it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next((int(line.split()[1]) for line in fh if line.startswith("TracerPid:")), 0)
    except OSError:
        return 0


def _remove_quietly(path: str) -> None:
    """Delete a sandbox's host dir (at exit or close): iteratively, so no tree it holds makes this raise."""
    try:
        empty_dir(path)
        os.rmdir(path)
    except OSError as exc:
        log.warning("could not remove the sandbox dir %s: %s", path, exc)


def _warn_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            "ProcessSandbox isolation is weaker than Docker's (shared kernel, filesystem and user "
            "accounting; rlimits instead of cgroups): use DockerSandboxConfig for untrusted code at scale",
            RuntimeWarning,
            stacklevel=3,
        )


class ProcessSandbox(Sandbox):
    """A sandbox backed by a local subprocess running the same session server as the Docker backend."""

    def __init__(self, config: ProcessSandboxConfig | None = None) -> None:
        super().__init__()
        self.config = config or ProcessSandboxConfig()
        _warn_once()
        self._proc: subprocess.Popen[bytes] | None = None
        self._root_dir: str | None = None
        self._finalizer: weakref.finalize | None = None
        python = shutil.which(self.config.python, path=SAFE_PATH) or shutil.which(self.config.python)
        if python is None:
            raise SandboxUnavailableError(
                f"python interpreter {self.config.python!r} not found on {SAFE_PATH}: set ProcessSandboxConfig.python"
            )
        self._python = python
        self.network_isolated = False
        self.isolation_error: str | None = None  # why the solution could see the host (None: it cannot)
        self._jail: JailSpec | None = None
        self._uid_lease: UidLease | None = None
        self._drop_to: int | None = None
        try:
            self._drop_to = self._choose_uid()
            self._make_dirs()
            self._start_session()
        except BaseException:
            self.close()
            raise

    def _choose_uid(self) -> int | None:
        """The uid the session drops to: None unless started as root; pinned by config, else a private lease."""
        if os.geteuid() != 0:
            return None
        if self.config.run_as_uid is not None:
            return self.config.run_as_uid
        self._uid_lease = UidLease(self.config.private_uid_first, self.config.private_uid_count)
        return self._uid_lease.uid

    def host_isolation_problem(self) -> str | None:
        """Why the session's code could see the host's files or act as its user, with the fix; None when it cannot.

        Two reasons: the minimal root is missing (the kernel refused its namespaces, or ``private_root`` is off),
        or the trainer was not started as root, so the session runs under the host's uid and can open the host
        processes' pipes through /proc and use the user's files, whatever namespaces it got."""
        if self.isolation_error:
            return (
                f"{self.isolation_error}. Fix: use the Docker backend (sandbox kind: docker); or let the process "
                "backend make its namespaces: inside a container run it with --security-opt seccomp=unconfined "
                "--security-opt apparmor=unconfined (a root trainer also needs --cap-add SYS_ADMIN), on a host allow "
                "user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0); and keep "
                "ProcessSandboxConfig.private_root on"
            )
        if self._drop_to is not None:
            return None
        return (
            f"its code runs as the host's uid {os.getuid()} (the trainer was not started as root), so it can open "
            "the trainer's pipes through /proc/<pid>/fd and read or write the trainer's files. Fix: use the Docker "
            "backend (sandbox: {kind: docker}), or start the trainer as root so that each process sandbox drops to a "
            "private uid"
        )

    @property
    def workdir(self) -> str:
        """The host path of this sandbox's work dir."""
        assert self._root_dir is not None
        return os.path.join(self._root_dir, "work")

    def _make_dirs(self) -> None:
        self._root_dir = tempfile.mkdtemp(prefix="agentrl-sbx-", dir=self.config.base_dir)
        # Removed at interpreter exit even without close(); the server itself exits when its stdin closes.
        self._finalizer = weakref.finalize(self, _remove_quietly, self._root_dir)
        for sub in ("work", "tmp", "jail"):
            os.mkdir(os.path.join(self._root_dir, sub), 0o700)
        if self._drop_to is not None:
            for path in (self._root_dir, self.workdir, os.path.join(self._root_dir, "tmp")):
                os.chown(path, self._drop_to, self._drop_to)
        if not self.config.private_root:
            self.isolation_error = "ProcessSandboxConfig.private_root is off"
            return
        self._jail = JailSpec(
            plan=plan_for(self._python),
            mount_point=os.path.join(self._root_dir, "jail"),
            workdir_bytes=self.config.workdir_size_bytes,
            tmp_bytes=self.config.tmp_size_bytes,
            max_inodes=self.config.max_inodes,
            owner=self._drop_to if self._drop_to is not None else os.getuid(),
            new_network=self.config.isolate_network,
        )

    def _rlimits(self) -> dict[str, int]:
        cfg = self.config
        uid = self._drop_to if self._drop_to is not None else os.getuid()
        # RLIMIT_NPROC counts every process of the uid, so leave room for the ones it already has (none for a
        # leased private uid; a pinned uid may share with others, and then the limit is only as exact as this count).
        nproc = cfg.max_processes + processes_of(uid)
        return {
            "RLIMIT_AS": cfg.memory_bytes,
            "RLIMIT_NPROC": nproc,
            "RLIMIT_FSIZE": cfg.max_file_bytes,
            "RLIMIT_CPU": cfg.cpu_time_s,
        }

    def _isolate(self) -> None:
        """Runs in the child between fork and exec: the minimal root (or a new network namespace), then drop root."""
        if self._jail is not None:
            try:
                enter(self._jail)
            except OSError as exc:  # the parent reads why (preexec_fn's own error says only that it failed)
                with open(os.path.join(self._root_dir or "", "jail-error"), "w") as fh:
                    fh.write(str(exc))
                raise
        elif self.config.isolate_network:
            _LIBC.unshare(CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWUSER | CLONE_NEWNET)
        if self._drop_to is not None:
            os.setgroups([])
            os.setgid(self._drop_to)
            os.setuid(self._drop_to)

    def _server_config(self) -> tuple[dict[str, object], dict[str, str]]:
        """The session server's config and environment: paths inside the minimal root, or the host's."""
        assert self._root_dir is not None
        jailed = self._jail is not None
        work, tmp = (WORKDIR, TMPDIR) if jailed else (self.workdir, os.path.join(self._root_dir, "tmp"))
        server_cfg = {
            "workdir": work,
            "max_output_bytes": self.config.max_output_bytes,
            "max_read_bytes": self.config.max_read_bytes,
            "wipe_dirs": [work, tmp],
            "private_fs": jailed,  # only a private root may be swept whole: the host's holds the user's files
            "untraceable": self._drop_to is not None,  # at the host's own uid it could not keep the host out
            "kill_background": self.config.kill_background,
            "rlimits": self._rlimits(),
        }
        env = {"PATH": SAFE_PATH, "HOME": work, "TMPDIR": tmp, "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}
        return server_cfg, {**env, **self.config.env}

    def _start_session(self) -> None:
        assert self._root_dir is not None
        try:
            self._spawn()
        except subprocess.SubprocessError as exc:  # preexec_fn raised: the jail says why if it was the jail
            error_file = os.path.join(self._root_dir, "jail-error")
            if self._jail is None or not os.path.exists(error_file):
                raise SandboxStartError(f"could not start {self._python} for a process sandbox: {exc}") from exc
            with open(error_file) as fh:
                reason = fh.read()
            self._jail, self.isolation_error = None, f"the kernel refused the minimal root ({reason})"
            log.warning("process sandbox: %s; it runs on the host's filesystem and grading refuses it", reason)
            self._spawn()

    def _spawn(self) -> None:
        assert self._root_dir is not None
        server_cfg, env = self._server_config()
        log_file = open(os.path.join(self._root_dir, "server.log"), "ab")
        try:
            self._proc = subprocess.Popen(
                [self._python, "-I", "-c", SERVER_SOURCE, json.dumps(server_cfg)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_file,
                cwd=self.workdir,
                env=env,
                start_new_session=True,
                preexec_fn=self._isolate,
                bufsize=0,
            )
        except OSError as exc:
            raise SandboxStartError(f"could not start {self._python} for a process sandbox: {exc}") from exc
        finally:
            log_file.close()
        assert self._proc.stdin is not None and self._proc.stdout is not None
        limit = max_frame_bytes(self.config.max_output_bytes, self.config.max_read_bytes)
        self._channel = FrameChannel(
            self._proc.stdout.fileno(),
            self._proc.stdin.fileno(),
            docker_mux=False,
            max_frame_bytes=limit,
            keepalive=self._proc,
        )
        try:
            devices = self._channel.call({"op": "ping"}, self.config.start_timeout_s).get("net_devices")
        except SessionLostError as exc:
            with open(os.path.join(self._root_dir, "server.log"), errors="replace") as fh:
                log_tail = fh.read()[-2000:]
            raise SandboxStartError(f"the session server in {self._python} did not start ({exc}): {log_tail}") from exc
        self.network_isolated = devices is not None and set(devices) <= {"lo"}

    def _stop_process(self) -> None:
        """End the session, then, with a private uid, every process of that uid from the host (``kill_uid``):
        whatever the supervisor's own sweep missed. SandboxLeftoverError when one survives (the uid then stays
        out of the lease pool while it lives)."""
        proc, self._proc, self._channel = self._proc, None, None
        if proc is None:
            return
        assert proc.stdin is not None and proc.stdout is not None
        # EOF first: the server kills its worker and descendants and collects them, so none is left a zombie of
        # an init that does not reap (the host's kill of the uid would orphan them).
        proc.stdin.close()
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        if self._uid_lease is not None:
            kill_uid(self._uid_lease.uid)  # not only the supervisor's sweep: it runs as the code it sweeps

    def _check_reset(self, reply: dict[str, object]) -> None:
        """With a private uid: every running process of the uid must be the supervisor or its fresh worker, and
        the supervisor untraced; else SandboxLeftoverError (the reset restarts the session from the host)."""
        if self._uid_lease is None or self._proc is None:
            return
        kept = {self._proc.pid, *(pid for pid in reply.get("pids", ()) if isinstance(pid, int))}  # type: ignore[attr-defined]
        left = sorted(set(running_processes_of(self._uid_lease.uid)) - kept)
        if left or _tracer_of(self._proc.pid):
            raise SandboxLeftoverError(f"processes {left[:10]} of the sandbox survived its reset (or it is traced)")

    def _restart(self) -> None:
        self._stop_process()
        if self._jail is None:  # the minimal root's dirs are tmpfs of its namespace: gone with its processes
            for sub in ("work", "tmp"):
                empty_dir(os.path.join(self._root_dir or "", sub))
        self._start_session()

    def close(self) -> None:
        """Stop the session and delete the temp dirs; idempotent."""
        self._closed = True
        try:
            self._stop_process()
        except SandboxLeftoverError as exc:
            log.error("closing %r: %s", self, exc)
        self._root_dir = None
        if self._finalizer is not None:
            self._finalizer()
        if self._uid_lease is not None:
            self._uid_lease.release()  # after the session's processes are gone, so the next holder starts clean

    def __repr__(self) -> str:
        return f"ProcessSandbox({self._root_dir or 'closed'})"
