"""The session supervisor that runs INSIDE a sandbox: it answers the host's framed requests on stdin/stdout.

Ops: run (a cell in the worker), exec (a one-off program), write, read, reset, ping, and service_start /
service_call / service_stop (request/response processes running host-supplied source). Output is capped
here, inside the sandbox; on a timeout or crash the worker's tree is killed and a fresh worker starts.
Stdlib only; shipped as source.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import signal
import sys
import time
from typing import Any

from sandboxes.session.fdwait import wait_fds
from sandboxes.session.process_tree import (
    CHUNK,
    PR_SET_CHILD_SUBREAPER,
    Capture,
    apply_limits,
    kill_descendants,
    new_pipe,
    oom_kills,
    read_frame,
    reap,
    set_dumpable,
    strangers,
    wait_for,
    write_frame,
)
from sandboxes.session.service import Service
from sandboxes.session.wipe import wipe
from sandboxes.session.worker import Worker

Reply = dict[str, Any]


class Supervisor:
    """Answers the host's requests: run, exec, write, read, reset, ping."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.worker = Worker(cfg)
        self.services: dict[str, Service] = {}
        self.compiled: dict[str, Any] = {}  # service source -> code: compiled once, not per service

    def kept(self) -> tuple[int, ...]:
        """Processes that outlive a request: the worker and the running services."""
        return (self.worker.pid, *(service.pid for service in self.services.values()))

    def handle(self, req: dict[str, Any]) -> Reply:
        """Dispatch one request; a failing op is an error reply, never the server's end."""
        op = getattr(self, "op_" + str(req.get("op")), None)
        if op is None:
            return {"ok": False, "error": "unknown op %r" % req.get("op")}
        try:
            reply = op(req)
        except Exception as exc:  # noqa: BLE001 - report any failure to the host, keep serving
            return {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
        reap()
        reply.setdefault("ok", True)
        return reply

    def op_ping(self, req: dict[str, Any]) -> Reply:
        """Liveness, pids and the network devices the sandbox sees."""
        try:  # per network namespace: only "lo" means the sandbox has no network
            with open("/proc/self/net/dev") as fh:
                devices: list[str] | None = [line.split(":")[0].strip() for line in fh.readlines()[2:]]
        except OSError:
            devices = None
        return {"pid": os.getpid(), "worker": self.worker.pid, "net_devices": devices}

    def op_run(self, req: dict[str, Any]) -> Reply:
        """Run a code cell in the stateful worker; a timeout or crash replaces the worker."""
        start, worker = time.monotonic(), self.worker
        worker.reset_captures()
        oom_before = oom_kills()
        lost_before = False
        try:
            write_frame(worker.req_w, {"code": req["code"]})
        except BrokenPipeError:  # the worker died between cells (e.g. a thread of the last cell exited it)
            worker.kill()
            worker = self.worker = Worker(self.cfg)
            write_frame(worker.req_w, {"code": req["code"]})
            lost_before = True
        deadline = start + float(req["timeout_s"])
        reply, fds = None, [worker.res_r, worker.out.fd, worker.err.fd]
        while reply is None and worker.res_r in fds:
            remaining = deadline - time.monotonic()
            ready = wait_fds(fds, [], remaining)[0] if remaining > 0 else []
            if not ready:
                break
            for fd in ready:
                if fd == worker.res_r:
                    reply = self.read_reply(worker, fds)
                elif not (worker.out if fd == worker.out.fd else worker.err).pump():
                    fds.remove(fd)
        if reply is not None:
            worker.out.drain()
            worker.err.drain()
            if self.cfg.get("kill_background", True):
                kill_descendants(keep=self.kept())
            return self.result(worker, reply["exit_code"], start, oom=reply["memory_error"], restarted=lost_before)
        # Timed out, or the worker died mid-cell (os._exit, a signal, the OOM killer): start a fresh one.
        timed_out = time.monotonic() >= deadline
        status = worker.kill()
        self.worker = Worker(self.cfg)
        oom_after = oom_kills()
        oom = (oom_after or 0) > oom_before if oom_before is not None else status == -signal.SIGKILL
        exit_code = None if timed_out else status
        return self.result(worker, exit_code, start, timed_out=timed_out, oom=oom and not timed_out, restarted=True)

    @staticmethod
    def read_reply(worker: Worker, fds: list[int]) -> Reply | None:
        """The worker's framed reply, or None (its fd leaves ``fds``) when it died mid-cell."""
        try:
            return read_frame(worker.res_r)
        except (EOFError, ValueError):
            fds.remove(worker.res_r)  # the worker died mid-cell
            return None

    @staticmethod
    def result(
        proc: Worker | Program,
        exit_code: int | None,
        start: float,
        *,
        timed_out: bool = False,
        oom: bool = False,
        restarted: bool = False,
    ) -> Reply:
        """The reply of a run or exec: captured output, exit status and what went wrong."""
        return {
            "stdout": proc.out.text(),
            "stderr": proc.err.text(),
            "exit_code": exit_code,
            "timed_out": timed_out,
            "oom_killed": oom,
            "restarted": restarted,
            "truncated": proc.out.truncated or proc.err.truncated,
            "duration_s": time.monotonic() - start,
        }

    def op_exec(self, req: dict[str, Any]) -> Reply:
        """Run a one-off program (argv, optional stdin) with the output caps and a timeout."""
        start = time.monotonic()
        program = Program(self.cfg, req["argv"], req.get("stdin"))
        status, timed_out = program.pump(start + float(req["timeout_s"]))
        if self.cfg.get("kill_background", True):
            kill_descendants(keep=self.kept())
        return self.result(program, None if timed_out else status, start, timed_out=timed_out)

    def op_write(self, req: dict[str, Any]) -> Reply:
        """Write base64-encoded files under the work dir."""
        for path, data in req["files"].items():
            full = os.path.join(self.cfg["workdir"], path)
            os.makedirs(os.path.dirname(full) or ".", exist_ok=True)
            with open(full, "wb") as fh:
                fh.write(base64.b64decode(data))
        return {}

    def op_read(self, req: dict[str, Any]) -> Reply:
        """Read one file of the work dir (base64), refused above max_read_bytes."""
        full, cap = os.path.join(self.cfg["workdir"], req["path"]), self.cfg["max_read_bytes"]
        size = os.path.getsize(full)
        if size > cap:
            return {"ok": False, "error": "%s is %d bytes, over max_read_bytes=%d" % (full, size, cap)}
        with open(full, "rb") as fh:
            return {"data": base64.b64encode(fh.read()).decode("ascii")}

    def op_service_start(self, req: dict[str, Any]) -> Reply:
        """Fork a service running ``source``; its id is random, so a stale id never names a later service."""
        source = req["source"]
        if source not in self.compiled:
            if len(self.compiled) >= 8:
                self.compiled.clear()
            self.compiled[source] = compile(source, "<service>", "exec")
        service_id = os.urandom(8).hex()
        self.services[service_id] = Service(self.cfg, self.compiled[source])
        return {"service": service_id}

    def op_service_call(self, req: dict[str, Any]) -> Reply:
        """One request/reply with a service; a timeout, crash or oversized reply ends it (reported, not raised)."""
        start = time.monotonic()
        service = self.services.get(req["service"])
        if service is None:
            error = "no such service: it ended, or the sandbox was reset"
            return {
                "reply": None,
                "timed_out": False,
                "exit_code": None,
                "error": error,
                "stderr": "",
                "oom_killed": False,
            }
        service.err.data, service.err.truncated = bytearray(), False
        oom_before = oom_kills()
        result = service.request(req["message"], start + float(req["timeout_s"]), self.cfg["max_read_bytes"])
        oom = False
        if not service.alive:
            del self.services[req["service"]]
            oom_after = oom_kills()
            died_killed = result["exit_code"] == -signal.SIGKILL
            oom = (oom_after or 0) > oom_before if oom_before is not None else died_killed
        if self.cfg.get("kill_background", True):
            kill_descendants(keep=self.kept())
        result.update(stderr=service.err.text(), oom_killed=oom and not result["timed_out"])
        result["duration_s"] = time.monotonic() - start
        return result

    def op_service_stop(self, req: dict[str, Any]) -> Reply:
        """End a service (idempotent: an unknown id is already gone)."""
        service = self.services.pop(req["service"], None)
        if service is not None:
            service.kill()
        return {}

    def op_reset(self, req: dict[str, Any]) -> Reply:
        """Kill every process, erase what they left (``wipe``: every writable place) and start a fresh worker.

        Fails (an error reply: the host then restarts or replaces the sandbox) rather than wipe around a process
        that survived the kills: one left could write after the wipe or serve the next episode.
        """
        self.worker.kill()
        for service in self.services.values():
            service.kill()
        self.services.clear()
        if not kill_descendants():  # nothing still running may write after the wipe
            raise RuntimeError("processes kept appearing through 50 sweeps of kills")
        left = strangers(()) if self.cfg.get("own_pid_namespace") else []
        if left:
            raise RuntimeError("processes %s outside this supervisor's tree survived the kills" % left[:10])
        wipe(self.cfg)
        self.worker = Worker(self.cfg)
        return {"pids": [os.getpid(), self.worker.pid]}


class Program:
    """A one-off program in its own process group, stdin fed and output capped by the select loop."""

    def __init__(self, cfg: dict[str, Any], argv: list[str], stdin: str | None) -> None:
        out_r, out_w = new_pipe()
        err_r, err_w = new_pipe()
        in_r, in_w = os.pipe()
        self.pending = (stdin or "").encode("utf-8")
        self.pid = os.fork()
        if self.pid == 0:
            os.setsid()
            for src, dst in ((in_r, 0), (out_w, 1), (err_w, 2)):
                os.dup2(src, dst)
            try:
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                apply_limits(cfg)
                os.chdir(cfg["workdir"])
                os.execvp(argv[0], argv)
            except BaseException as exc:  # noqa: BLE001 - the child must reach os._exit
                os.write(2, ("sandbox: cannot execute %r: %s\n" % (argv[0], exc)).encode())
            os._exit(127)
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        os.set_blocking(in_w, False)
        self.in_w: int | None = in_w
        self.out = Capture(out_r, cfg["max_output_bytes"])
        self.err = Capture(err_r, cfg["max_output_bytes"])
        if not self.pending:
            self.close_stdin()

    def close_stdin(self) -> None:
        """Close the program's stdin (idempotent), so it sees EOF."""
        if self.in_w is not None:
            os.close(self.in_w)
            self.in_w = None

    def feed(self) -> None:
        """Write the next chunk of stdin; close it when done or when the program stopped reading."""
        assert self.in_w is not None
        try:
            self.pending = self.pending[os.write(self.in_w, self.pending[:CHUNK]) :]
        except BlockingIOError:
            return
        except BrokenPipeError:
            self.pending = b""
        if not self.pending:
            self.close_stdin()

    def pump(self, deadline: float) -> tuple[int | None, bool]:
        """Returns (exit code, timed out). Polls the exit too: a background child may hold the pipes."""
        fds, status = [self.out.fd, self.err.fd], None
        while status is None and time.monotonic() < deadline:
            writers = [self.in_w] if self.in_w is not None else []
            wait = min(deadline - time.monotonic(), 0.01 if fds else 0.001)
            ready_r, ready_w = wait_fds(fds, writers, max(wait, 0))
            if ready_w:
                self.feed()
            for fd in ready_r:
                if not (self.out if fd == self.out.fd else self.err).pump():
                    fds.remove(fd)
            status = wait_for(self.pid, 0)
        timed_out = status is None
        if timed_out:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:
                pass
            status = wait_for(self.pid, 1.0)
        self.out.drain()
        self.err.drain()
        self.close_stdin()
        os.close(self.out.fd)
        os.close(self.err.fd)
        return status, timed_out


def main() -> None:
    """Serve requests on stdin until it closes, then kill everything we started."""
    cfg = json.loads(sys.argv[1])
    # Orphans of a cell (double forks, daemons) are re-parented to us, so kill_descendants finds them.
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # Not traceable by the code it supervises (same uid): its kills, sweeps and replies stay its own. Its
    # children make themselves dumpable again before running anything (user code may inspect its own process).
    # Not where the sandbox runs as the host's own uid: that code can act as the host's user anyway (graders
    # refuse such a sandbox), and the host's view of the session's pipes stays as it was.
    if cfg.get("untraceable", True):
        set_dumpable(False)
    supervisor = Supervisor(cfg)
    while True:
        try:
            req = read_frame(0)
        except (EOFError, OSError):
            break
        write_frame(1, supervisor.handle(req))
    supervisor.worker.kill()
    for service in supervisor.services.values():
        service.kill()


if __name__ == "__main__":
    main()
