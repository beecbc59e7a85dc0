"""The trusted judge: runs a task's tests against a proxy of the solution and reports one verdict per test.

It runs on the host as its own process (stdlib only, ``python3 -I -S``; shipped with wire.py), never in
the sandbox, so the solution cannot reach its memory, descriptors or verdicts. A zygote hardens itself
once (non-dumpable, an unprivileged uid when started as root, a memory limit) and forks a fresh child per
grading job. The child runs the task's trusted prefix and tests; the entry point is a ``Remote`` whose
calls travel as plain data, through the host, to the solution's sandbox service.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import struct
import sys
from typing import Any

from envs.code_exec.grading.wire import (
    TAG,
    Decoder,
    Encoder,
    SolutionError,
    WireError,
    WireSizeError,
    loads,
    rebuild_exception,
)

PR_SET_DUMPABLE = 4


class FrameReader:
    """Length-prefixed JSON frames from a pipe; bytes survive an interrupted read (the alarm may fire)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf = fd, bytearray()

    def read(self) -> Any:
        """The next frame (EOFError when the pipe closes)."""
        while True:
            if len(self.buf) >= 4:
                (size,) = struct.unpack(">I", self.buf[:4])
                if len(self.buf) >= 4 + size:
                    data = bytes(self.buf[4 : 4 + size])
                    del self.buf[: 4 + size]
                    return json.loads(data.decode("utf-8"))
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise EOFError("the host closed the judge's channel")
            self.buf += chunk


def write_frame(fd: int, message: Any) -> None:
    """Write one frame whole: the alarm is held off meanwhile, so a frame is never cut."""
    data = json.dumps(message).encode("utf-8")
    view = memoryview(struct.pack(">I", len(data)) + data)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        while view:
            view = view[os.write(fd, view) :]
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class Remote:
    """The test code's handle on an object of the solution: calls and reads are requests, equality is identity."""

    __slots__ = ("_judge", "_target", "_label")

    def __init__(self, judge: Judge, target: dict[str, Any], label: str) -> None:
        self._judge, self._target, self._label = judge, target, label

    def __repr__(self) -> str:
        return f"<{self._label} from the solution>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._judge.call(self._target, args, kwargs)

    def __iter__(self) -> Any:
        return self._judge.request({"op": "iter", **self._target})

    def __next__(self) -> Any:
        return self._judge.request({"op": "next", **self._target})

    def __len__(self) -> int:
        return self._judge.request({"op": "special", "how": "len", **self._target})

    def __bool__(self) -> bool:
        return self._judge.request({"op": "special", "how": "bool", **self._target})

    def __str__(self) -> str:
        return self._judge.request({"op": "special", "how": "str", **self._target})

    def __getitem__(self, key: Any) -> Any:
        return self._judge.request({"op": "special", "how": "getitem", "key": self._judge.encode(key), **self._target})

    def __contains__(self, key: Any) -> bool:
        return self._judge.request({"op": "special", "how": "contains", "key": self._judge.encode(key), **self._target})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._judge.request({"op": "getattr", "attr": name, **self._target})


class Judge:
    """One grading job in a forked child: the test namespace, the request sequence, the references."""

    def __init__(self, reader: FrameReader, out_fd: int, job: dict[str, Any]) -> None:
        self.reader, self.out_fd, self.job = reader, out_fd, job
        self.seq, self.gen = 0, 0
        self.remotes: dict[tuple[int, int], Remote] = {}
        self.encoder = Encoder(self._unsendable)

    def send(self, message: dict[str, Any]) -> None:
        """A message to the host relay."""
        write_frame(self.out_fd, message)

    def encode(self, value: Any) -> Any:
        """An argument as plain data (a Remote goes back as its reference)."""
        return self.encoder.encode(value)

    def _unsendable(self, value: Any) -> Any:
        if isinstance(value, Remote) and "id" in value._target:
            return {TAG: "ref", "id": value._target["id"]}
        raise TypeError(f"a {type(value).__name__} cannot be passed to the solution across the grading boundary")

    def _remote(self, data: dict[str, Any]) -> Remote:
        ref, label = data.get("id"), data.get("type")
        if type(ref) is not int or type(label) is not str:
            raise WireError("malformed reference")
        key = (self.gen, ref)
        if key not in self.remotes:  # one proxy per object, so `iter(it) is it` holds as in Python
            self.remotes[key] = Remote(self, {"id": ref, "gen": self.gen}, f"{label[:80]} object")
        return self.remotes[key]

    def call(self, target: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call the solution's function (or a callable reference) and mirror any mutation of the arguments."""
        request = {
            "op": "call",
            "args": [self.encode(a) for a in args],
            "kwargs": [[k, self.encode(v)] for k, v in kwargs.items()],
            **target,
        }
        return self.request(request, args, kwargs)

    def request(self, request: dict[str, Any], args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
        """Send one request through the host and turn the answer into a value or an exception."""
        self.seq += 1
        self.send({"op": "rpc", "seq": self.seq, "request": request})
        while True:  # an answer to a request the alarm already gave up on is dropped
            answer = self.reader.read()
            if answer.get("seq") == self.seq:
                break
        self.gen = answer.get("gen", self.gen)
        failure = answer.get("failure")
        if failure is not None:
            kind, detail = failure.get("kind"), str(failure.get("detail"))
            raise TimeoutError(detail) if kind == "timeout" else SolutionError(detail)
        try:
            return self.outcome(loads(answer["text"]), args, kwargs or {})
        except WireSizeError as exc:
            raise SolutionError(f"the solution's answer is too large to check ({exc})") from None
        except WireError as exc:
            self.send({"op": "flag", "kind": "channel_tampering", "detail": f"malformed answer: {exc}"[:200]})
            raise SolutionError(f"the solution's process sent malformed data ({exc})") from None

    def outcome(self, data: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The decoded value (after mirroring mutations), or the exception to raise."""
        if type(data) is not dict:
            raise WireError("an answer must be an object")
        if "value" in data:
            value = Decoder(self._remote).decode(data["value"])
            self.mirror(data.get("mutated", {}), args, kwargs)
            return value
        if "raise" in data:
            raise rebuild_exception(data["raise"])
        if data.get("stop") is True:
            raise StopIteration
        raise WireError(f"an answer without a value, exception or stop: {str(data)[:100]}")

    def mirror(self, mutated: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Apply in place the changes the solution made to mutable arguments (call-by-sharing, as in-process)."""
        if type(mutated) is not dict:
            raise WireError("malformed mutations")
        for key, data in mutated.items():
            target = args[int(key)] if key.isdigit() and int(key) < len(args) else kwargs.get(key)
            value = Decoder(self._remote).decode(data)
            if type(value) is not type(target):
                raise WireError(f"mutation of argument {key[:20]} changes its type")
            if type(target) in (list, bytearray):
                target[:] = value
            elif type(target) in (dict, set):
                target.clear()
                target.update(value)

    def run(self) -> None:
        """Run the prefix, bind the proxy, then each test under its own alarm; report as it goes."""
        namespace: dict[str, Any] = {"__name__": "__judge__"}
        try:
            exec(compile_prefix(self.job["prefix"]), namespace)
        except BaseException as exc:  # noqa: BLE001 - the task's own code failed here: a grader problem
            self.send({"op": "prefix_error", "error": f"{type(exc).__name__}: {exc}"[:500]})
            return
        entry = self.job["entry_point"]
        namespace[entry] = Remote(self, {"name": entry}, f"function {entry}")
        for index, test in enumerate(self.job["tests"]):
            self.send({"op": "test", "index": index})
            self.send({"op": "verdict", "index": index, "error": self.run_test(test, index, namespace)})
        self.send({"op": "done"})

    def run_test(self, test: str, index: int, namespace: dict[str, Any]) -> str | None:
        """None when the test ran without an exception, else what it raised."""
        signal.setitimer(signal.ITIMER_REAL, float(self.job["alarm_s"]))
        try:
            exec(compile(test, f"<test {index}>", "exec"), namespace)
            return None
        except BaseException as exc:  # noqa: BLE001 - whatever a test raises is its failure
            return f"{type(exc).__name__}: {exc}"[:300]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)


def compile_prefix(prefix: str) -> Any:
    """The task's prefix as code; one that ends in a bare ``def ...:`` header (the solution writes the body) gets
    a ``pass`` body here, since only its imports and helpers matter to the tests."""
    try:
        return compile(prefix, "<task prefix>", "exec")
    except SyntaxError:
        lines = [line for line in prefix.splitlines() if line.strip()]
        indent = (lines[-1][: len(lines[-1]) - len(lines[-1].lstrip())] if lines else "") + "    "
        return compile(prefix + "\n" + indent + "pass\n", "<task prefix>", "exec")


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError("the test ran past its time limit")


def harden(cfg: dict[str, Any]) -> None:
    """Once, in the zygote: an unprivileged uid when root, not dumpable (no ptrace, no /proc reads), memory cap."""
    if os.geteuid() == 0 and cfg.get("uid"):
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    resource.setrlimit(resource.RLIMIT_AS, (cfg["memory_bytes"], cfg["memory_bytes"]))
    os.listdir(os.path.dirname(os.__file__))  # test code imports the stdlib: it must stay readable as this uid


def run_child(reader: FrameReader, out_fd: int, job: dict[str, Any]) -> None:
    """The forked child of one job: no forking of its own, a CPU cap, the alarm, then the tests."""
    code = 0
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
        cpu_s = int(job["cpu_s"]) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        signal.signal(signal.SIGALRM, _alarm)
        write_frame(out_fd, {"op": "hello", "pid": os.getpid()})  # the host kills this pid if it overruns
        Judge(reader, out_fd, job).run()
    except BaseException as exc:  # noqa: BLE001 - report, then the child must reach os._exit
        code = 1
        try:
            write_frame(out_fd, {"op": "crash", "error": f"{type(exc).__name__}: {exc}"[:500]})
        except OSError:
            pass
    finally:
        os._exit(code)


def main() -> None:
    """The zygote: harden, say whether that worked, then fork one child per job frame until the channel closes."""
    in_fd, out_fd = os.dup(0), os.dup(1)
    try:
        harden(json.loads(sys.argv[1]))
    except OSError as exc:
        write_frame(out_fd, {"op": "error", "error": f"{type(exc).__name__}: {exc}", "python": sys.executable})
        return
    write_frame(out_fd, {"op": "ready"})
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # prints of test code go nowhere; the channel is private
        os.dup2(null, fd)
    reader = FrameReader(in_fd)
    while True:
        try:
            job = reader.read()
        except EOFError:
            return
        if not isinstance(job, dict) or job.get("op") != "job":
            continue  # a late answer to a child that is gone
        pid = os.fork()
        if pid == 0:
            run_child(reader, out_fd, job)
        status = os.waitpid(pid, 0)[1]
        write_frame(out_fd, {"op": "exit", "status": os.waitstatus_to_exitcode(status)})
