"""The session worker: a forked process that owns the cell namespace and runs one cell at a time.

Stdlib only; shipped as source. It lives in its own process group so a timeout kills its whole tree.
"""

from __future__ import annotations

import ast
import ctypes
import os
import signal
import sys
import traceback
from typing import Any

from sandboxes.session.process_tree import (
    PR_SET_PDEATHSIG,
    REAPED,
    Capture,
    apply_limits,
    kill_descendants,
    new_pipe,
    read_frame,
    set_dumpable,
    wait_for,
    write_frame,
)


class Worker:
    """A forked Python process that owns the session namespace and runs one cell at a time."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        out_r, out_w = new_pipe()
        err_r, err_w = new_pipe()
        req_r, self.req_w = os.pipe()
        self.res_r, res_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.setsid()
            for fd in (out_r, err_r, self.req_w, self.res_r):
                os.close(fd)
            self.serve(req_r, res_w, out_w, err_w)
        for fd in (req_r, res_w, out_w, err_w):
            os.close(fd)
        self.out = Capture(out_r, cfg["max_output_bytes"])
        self.err = Capture(err_r, cfg["max_output_bytes"])

    def serve(self, req_r: int, res_w: int, out_w: int, err_w: int) -> None:
        """The child's loop: read a cell, run it, reply; never returns."""
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        try:
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            set_dumpable(True)
            apply_limits(self.cfg)
            os.chdir(self.cfg["workdir"])
            sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
            sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
            namespace = {"__name__": "__main__", "__builtins__": __builtins__}
            while True:
                write_frame(res_w, run_cell(read_frame(req_r)["code"], namespace))
        finally:
            os._exit(0)

    def reset_captures(self) -> None:
        """Empty the output buffers before a new cell."""
        self.out.data, self.err.data = bytearray(), bytearray()
        self.out.truncated = self.err.truncated = False

    def kill(self) -> int | None:
        """Kill the worker's group and every other descendant; keep the output they left in the pipes."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
            # SIGKILL cannot be caught: a blocking wait is short and cheaper than polling.
            REAPED[self.pid] = os.waitpid(self.pid, 0)[1]
        except OSError:
            pass
        kill_descendants()
        status = wait_for(self.pid, 1.0)
        self.out.drain()
        self.err.drain()
        for fd in (self.req_w, self.res_r, self.out.fd, self.err.fd):
            os.close(fd)
        return status


def run_cell(code: str, namespace: dict[str, Any]) -> dict[str, Any]:
    """Execute like a notebook cell: the value of a final expression is printed (repr)."""
    exit_code, memory_error = 0, False
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, "<cell>", "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
            if value is not None:
                print(repr(value))
    except SystemExit as exc:
        exit_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # a cell's exception is its result, never the session's end
        memory_error = isinstance(exc, MemoryError)
        # Skip run_cell's own frame: the traceback starts at the user's code.
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None)
        exit_code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a cell may close its own streams
            pass
    return {"exit_code": exit_code, "memory_error": memory_error}
