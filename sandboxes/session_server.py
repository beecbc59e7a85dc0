"""The session server that runs INSIDE a sandbox (stdlib only; shipped as source via `python3 -c`).

A supervisor reads length-prefixed JSON requests on stdin and answers on stdout. Cells run in a
long-lived worker (its own process group) so state persists; stdout/stderr are capped here, inside
the sandbox; on a timeout or crash the worker's whole process tree is killed and a fresh worker starts.
"""

import base64
import ctypes
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
CHUNK = 65536
OOM_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError("channel closed")
        buf += chunk
    return buf


def read_frame(fd):
    (size,) = struct.unpack(">I", read_exact(fd, 4))
    return json.loads(read_exact(fd, size).decode("utf-8"))


def write_frame(fd, obj):
    data = json.dumps(obj).encode("utf-8")
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def apply_limits(cfg):
    """Runs in every child before it executes user code: rlimits (the process backend's only fence)."""
    import resource

    try:  # if the memory limit is hit, the kernel's OOM killer should pick user code, not the supervisor
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        pass
    for name, value in cfg.get("rlimits", {}).items():
        limit = getattr(resource, name)
        soft, hard = resource.getrlimit(limit)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (value, value))


def oom_kills():
    for path in OOM_FILES:
        try:
            with open(path) as fh:
                for line in fh:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except OSError:
            continue
    return None


def children_of(pid):
    """Direct children via /proc/PID/task/*/children (cheap: no scan of every process on the host)."""
    kids = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as fh:
                kids.extend(int(p) for p in fh.read().split())
    except OSError:
        pass
    return kids


def kill_descendants(keep=()):
    """SIGKILL every descendant of this supervisor except `keep`; orphans come back to us (subreaper)."""
    for _ in range(50):
        todo, found = children_of(os.getpid()), []
        while todo:
            pid = todo.pop()
            if pid in keep:
                todo.extend(children_of(pid))
                continue
            found.append(pid)
            todo.extend(children_of(pid))
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()
        time.sleep(0.001)


REAPED = {}


def reap():
    """Collect every exited child (zombie orphans included); statuses are kept for wait_for()."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = status


def wait_for(pid, timeout_s):
    """The exit code of `pid` (negative signal number if killed), or None if still running."""
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

    def __init__(self, fd, cap):
        self.fd, self.cap, self.data, self.truncated = fd, cap, bytearray(), False

    def pump(self):
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

    def drain(self):
        while self.pump():
            if not select.select([self.fd], [], [], 0)[0]:
                return

    def text(self):
        text = self.data.decode("utf-8", errors="replace")
        return text + ("\n[sandbox: output truncated at %d bytes]\n" % self.cap if self.truncated else "")


def new_pipe():
    r, w = os.pipe()
    os.set_blocking(r, False)
    return r, w


class Worker:
    """A forked Python process that owns the session namespace and runs one cell at a time."""

    def __init__(self, cfg):
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

    def serve(self, req_r, res_w, out_w, err_w):
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        try:
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            apply_limits(self.cfg)
            os.chdir(self.cfg["workdir"])
            sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
            sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
            namespace = {"__name__": "__main__", "__builtins__": __builtins__}
            while True:
                code = read_frame(req_r)["code"]
                write_frame(res_w, run_cell(code, namespace))
        finally:
            os._exit(0)

    def reset_captures(self):
        self.out.data, self.err.data = bytearray(), bytearray()
        self.out.truncated = self.err.truncated = False

    def kill(self):
        """Kill the worker's group and every other descendant; keep the output they left in the pipes."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        kill_descendants()
        status = wait_for(self.pid, 1.0)
        self.out.drain()
        self.err.drain()
        for fd in (self.req_w, self.res_r, self.out.fd, self.err.fd):
            os.close(fd)
        return status


def run_cell(code, namespace):
    """Execute like a notebook cell: the value of a final expression is printed (repr)."""
    import ast
    import traceback

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
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
        exit_code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    return {"exit_code": exit_code, "memory_error": memory_error}


class Supervisor:
    """Answers the host's requests: run, exec, write, read, reset, ping."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.worker = Worker(cfg)

    def handle(self, req):
        op = getattr(self, "op_" + str(req.get("op")), None)
        if op is None:
            return {"ok": False, "error": "unknown op %r" % req.get("op")}
        try:
            reply = op(req)
        except OSError as exc:
            return {"ok": False, "error": "%s: %s" % (type(exc).__name__, exc)}
        reap()
        reply["ok"] = True
        return reply

    def op_ping(self, req):
        try:  # per network namespace: only "lo" means the sandbox has no network
            with open("/proc/self/net/dev") as fh:
                devices = [line.split(":")[0].strip() for line in fh.readlines()[2:]]
        except OSError:
            devices = None
        return {"pid": os.getpid(), "worker": self.worker.pid, "net_devices": devices}

    def op_run(self, req):
        start, worker = time.monotonic(), self.worker
        worker.reset_captures()
        oom_before = oom_kills()
        write_frame(worker.req_w, {"code": req["code"]})
        deadline = start + float(req["timeout_s"])
        reply, fds = None, [worker.res_r, worker.out.fd, worker.err.fd]
        while reply is None and worker.res_r in fds:
            remaining = deadline - time.monotonic()
            ready = select.select(fds, [], [], max(remaining, 0))[0] if remaining > 0 else []
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
                kill_descendants(keep=(worker.pid,))
            return self.result(worker, reply["exit_code"], start, oom=reply["memory_error"])
        timed_out = time.monotonic() >= deadline
        status = worker.kill()
        self.worker = Worker(self.cfg)
        oom_after = oom_kills()
        oom = (oom_after or 0) > (oom_before or 0) if oom_before is not None else status == -9
        exit_code = None if timed_out else status
        return self.result(worker, exit_code, start, timed_out=timed_out, oom=oom and not timed_out, restarted=True)

    @staticmethod
    def read_reply(worker, fds):
        try:
            return read_frame(worker.res_r)
        except (EOFError, ValueError):
            fds.remove(worker.res_r)  # the worker died mid-cell (crash, os._exit, OOM kill)
            return None

    @staticmethod
    def result(proc, exit_code, start, timed_out=False, oom=False, restarted=False):
        return {
            "stdout": proc.out.text(), "stderr": proc.err.text(), "exit_code": exit_code,
            "timed_out": timed_out, "oom_killed": oom, "restarted": restarted,
            "truncated": proc.out.truncated or proc.err.truncated,
            "duration_s": time.monotonic() - start,
        }

    def op_exec(self, req):
        start = time.monotonic()
        program = Program(self.cfg, req["argv"], req.get("stdin"))
        status, timed_out = program.pump(start + float(req["timeout_s"]))
        kill_descendants(keep=(self.worker.pid,))
        return self.result(program, None if timed_out else status, start, timed_out=timed_out)

    def resolve(self, path):
        return os.path.join(self.cfg["workdir"], path)

    def op_write(self, req):
        for path, data in req["files"].items():
            full = self.resolve(path)
            os.makedirs(os.path.dirname(full) or ".", exist_ok=True)
            with open(full, "wb") as fh:
                fh.write(base64.b64decode(data))
        return {}

    def op_read(self, req):
        full, cap = self.resolve(req["path"]), self.cfg["max_read_bytes"]
        size = os.path.getsize(full)
        if size > cap:
            return {"ok": False, "error": "%s is %d bytes, over max_read_bytes=%d" % (full, size, cap)}
        with open(full, "rb") as fh:
            return {"data": base64.b64encode(fh.read()).decode("ascii")}

    def op_reset(self, req):
        self.worker.kill()
        for root in self.cfg["wipe_dirs"]:
            for name in os.listdir(root):
                path = os.path.join(root, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
        self.worker = Worker(self.cfg)
        return {}


class Program:
    """A one-off program in its own process group, stdin fed and output capped by the select loop."""

    def __init__(self, cfg, argv, stdin):
        out_r, out_w = new_pipe()
        err_r, err_w = new_pipe()
        in_r, self.in_w = os.pipe()
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
            except BaseException as exc:
                os.write(2, ("sandbox: cannot execute %r: %s\n" % (argv[0], exc)).encode())
            os._exit(127)
        for fd in (in_r, out_w, err_w):
            os.close(fd)
        os.set_blocking(self.in_w, False)
        self.out = Capture(out_r, cfg["max_output_bytes"])
        self.err = Capture(err_r, cfg["max_output_bytes"])

    def feed(self):
        try:
            self.pending = self.pending[os.write(self.in_w, self.pending[:CHUNK]):]
        except (BrokenPipeError, BlockingIOError) as exc:
            if isinstance(exc, BrokenPipeError):
                self.pending = b""
        if not self.pending:
            os.close(self.in_w)
            self.in_w = None

    def pump(self, deadline):
        """Returns (exit code, timed out). Polls the exit too: a background child may hold the pipes."""
        if not self.pending:
            os.close(self.in_w)
            self.in_w = None
        fds, status = [self.out.fd, self.err.fd], None
        while status is None and time.monotonic() < deadline:
            writers = [self.in_w] if self.in_w is not None else []
            wait = min(deadline - time.monotonic(), 0.01 if fds else 0.001)
            ready_r, ready_w = select.select(fds, writers, [], max(wait, 0))[:2]
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
        for fd in (self.in_w, self.out.fd, self.err.fd):
            if fd is not None:
                os.close(fd)
        return status, timed_out


def main():
    cfg = json.loads(sys.argv[1])
    # Orphans of a cell (double forks, daemons) are re-parented to us, so kill_descendants finds them.
    ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    supervisor = Supervisor(cfg)
    while True:
        try:
            req = read_frame(0)
        except (EOFError, OSError):
            break
        write_frame(1, supervisor.handle(req))
    supervisor.worker.kill()


if __name__ == "__main__":
    main()
