"""A service: a process forked from the supervisor that runs host-supplied Python source and answers requests.

Requests and replies are 4-byte-length-prefixed UTF-8 frames: the supervisor writes a request to the
service's fd 0 and reads exactly one reply frame from its fd 1, with a deadline; fd 2 is captured
(capped). The service lives in its own process group, so a timeout kills its whole tree. Stdlib only.
"""

from __future__ import annotations

import ctypes
import os
import signal
import struct
import time
from typing import Any

from sandboxes.session.fdwait import wait_fds
from sandboxes.session.process_tree import (
    CHUNK,
    PR_SET_PDEATHSIG,
    Capture,
    apply_limits,
    new_pipe,
    set_dumpable,
    wait_for,
)


class Service:
    """One running service process and the supervisor's ends of its pipes."""

    def __init__(self, cfg: dict[str, Any], code: Any) -> None:
        req_r, self.req_w = os.pipe()
        self.rep_r, rep_w = os.pipe()
        err_r, err_w = new_pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.setsid()
            for src, dst in ((req_r, 0), (rep_w, 1), (err_w, 2)):
                os.dup2(src, dst)
            # Nothing of the supervisor (its channel to the host, the worker's pipes) stays reachable.
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            self.serve(cfg, code)
        for fd in (req_r, rep_w, err_w):
            os.close(fd)
        os.set_blocking(self.rep_r, False)
        os.set_blocking(self.req_w, False)
        self.err = Capture(err_r, cfg["max_output_bytes"])
        self.buf = bytearray()
        self.alive = True

    @staticmethod
    def serve(cfg: dict[str, Any], code: Any) -> None:
        """The child: run ``code`` (compiled source that serves requests on fds 0/1 itself); never returns."""
        status = 0
        try:
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            set_dumpable(True)
            apply_limits(cfg)
            os.chdir(cfg["workdir"])
            exec(code, {"__name__": "__service__"})
        except BaseException as exc:  # noqa: BLE001 - the child must reach os._exit
            os.write(2, ("service failed: %s: %s\n" % (type(exc).__name__, exc)).encode("utf-8", "replace"))
            status = 1
        finally:
            os._exit(status)

    def request(self, text: str, deadline: float, max_reply_bytes: int) -> dict[str, Any]:
        """Send one request and wait for one reply frame; a timeout, death or oversized reply ends the service."""
        data = text.encode("utf-8")
        pending = struct.pack(">I", len(data)) + data
        while True:
            reply = self.take_frame(max_reply_bytes)
            if reply is not None:
                if self.alive:
                    self.err.drain()  # what it wrote to stderr before replying belongs to this request
                return reply
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self.end(timed_out=True)
            writers = [self.req_w] if pending else []
            readable, writable = wait_fds([self.rep_r, self.err.fd], writers, remaining)
            if writable:
                try:
                    pending = pending[os.write(self.req_w, pending[:CHUNK]) :]
                except BlockingIOError:
                    pass
                except BrokenPipeError:
                    return self.end()
            if self.err.fd in readable:
                self.err.pump()
            if self.rep_r in readable and not self.read_some():
                return self.end()

    def read_some(self) -> bool:
        """Append what the reply pipe holds to the buffer; False at EOF."""
        try:
            chunk = os.read(self.rep_r, CHUNK)
        except BlockingIOError:
            return True
        self.buf += chunk
        return bool(chunk)

    def take_frame(self, max_reply_bytes: int) -> dict[str, Any] | None:
        """The next complete reply frame from the buffer, an error reply, or None when incomplete."""
        if len(self.buf) < 4:
            return None
        (size,) = struct.unpack(">I", self.buf[:4])
        if size > max_reply_bytes:
            reply = self.end(error="the service sent a %d-byte reply (limit %d)" % (size, max_reply_bytes))
            reply["oversized"] = True
            return reply
        if len(self.buf) < 4 + size:
            return None
        text = bytes(self.buf[4 : 4 + size]).decode("utf-8", errors="replace")
        del self.buf[: 4 + size]
        return {"reply": text, "timed_out": False, "exit_code": None, "error": "", "oversized": False}

    def end(self, *, timed_out: bool = False, error: str = "") -> dict[str, Any]:
        """Kill the service (it timed out, died or misbehaved) and describe how it ended."""
        status = self.kill()
        if not error and not timed_out:
            error = "the service exited with status %s" % status
        exit_code = None if timed_out else status
        return {"reply": None, "timed_out": timed_out, "exit_code": exit_code, "error": error, "oversized": False}

    def kill(self) -> int | None:
        """Kill the service's process group and keep its last stderr; idempotent (the supervisor reaps orphans)."""
        if not self.alive:
            return None
        self.alive = False
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        status = wait_for(self.pid, 1.0)
        self.err.drain()
        for fd in (self.req_w, self.rep_r, self.err.fd):
            os.close(fd)
        return status
