"""The trusted judge: runs a task's tests against a proxy of the solution and reports one verdict per test.

It runs on the host as its own process (stdlib only, ``python3 -I -S``; shipped with wire.py and seal.py), never in
the sandbox, so the solution cannot reach its memory, descriptors or verdicts. A zygote hardens itself
once (non-dumpable, an unprivileged uid when started as root, a memory limit) and forks a fresh child per
grading job. The child runs the task's trusted prefix and tests; the entry point is a ``Remote`` whose
calls travel as plain data, through the host, to the solution's sandbox service. Every frame either way is
authenticated (seal.py): bytes that anyone else writes into the pipes are tampering, never a message.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import struct
import sys
from collections.abc import Iterator
from typing import Any

from envs.code_exec.grading.seal import JOB, KEY_BYTES, ZYGOTE, ChannelTampered, Sealer, job_key
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
    """Length-prefixed frames from a pipe; bytes survive an interrupted read (the alarm may fire)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf = fd, bytearray()

    def _size(self) -> int | None:
        if len(self.buf) < 4:
            return None
        (size,) = struct.unpack(">I", self.buf[:4])
        return size if len(self.buf) >= 4 + size else None

    def read(self) -> bytes:
        """The next frame, still sealed (EOFError when the pipe closes); the wait can be interrupted, the taking not."""
        while self._size() is None:
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise EOFError("the host closed the judge's channel")
            self.buf += chunk
        size = self._size() or 0
        data = bytes(self.buf[4 : 4 + size])
        del self.buf[: 4 + size]
        return data

    def read_message(self, sealer: Sealer, scope: bytes) -> Any:
        """The next frame of ``scope``, authenticated and decoded (ChannelTampered when it is not genuine)."""
        while self._size() is None:  # wait (interruptibly) until a whole frame is here
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise EOFError("the host closed the judge's channel")
            self.buf += chunk
        with ALARM.held():  # a frame taken but not counted would put the two sides' frame numbers out of step
            frame = self.read()
            if frame[:1] != scope:
                raise ChannelTampered(f"a frame of scope {frame[:1]!r} where {scope!r} was expected")
            body = sealer.open(frame)
        return json.loads(body.decode("utf-8"))


def write_frame(fd: int, sealer: Sealer, scope: bytes, message: Any) -> None:
    """Seal and write one frame whole: the alarm is held off meanwhile, so a frame is never cut or left uncounted."""
    body = json.dumps(message).encode("utf-8")
    with ALARM.held():
        data = sealer.seal(scope, body)
        view = memoryview(struct.pack(">I", len(data)) + data)
        while view:
            view = view[os.write(fd, view) :]


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

    def __init__(self, reader: FrameReader, out_fd: int, job: dict[str, Any], inbox: Sealer, outbox: Sealer) -> None:
        self.reader, self.out_fd, self.job = reader, out_fd, job
        self.inbox, self.outbox = inbox, outbox
        self.tampered: str | None = None  # why the host's stream stopped being trustworthy (test code cannot clear it)
        self.seq, self.gen = 0, 0
        self.remotes: dict[tuple[int, int], Remote] = {}
        self.encoder = Encoder(self._unsendable)

    def send(self, message: dict[str, Any]) -> None:
        """A message to the host relay."""
        write_frame(self.out_fd, self.outbox, JOB, message)

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
            try:
                if self.tampered is not None:
                    raise ChannelTampered(self.tampered)
                answer = self.reader.read_message(self.inbox, JOB)
                if type(answer) is not dict:
                    raise ChannelTampered("an answer that is not an object")
            except ChannelTampered as exc:  # recorded here: the test code may catch what it raises
                self.tampered = str(exc)
                raise SolutionError(f"the channel to the solution was tampered with ({exc})") from None
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
            error = self.run_test(test, index, namespace)
            if self.tampered is not None:
                raise ChannelTampered(self.tampered)
            self.send({"op": "verdict", "index": index, "error": error})
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


class _Alarm:
    """The per-test alarm's handler, which a frame being taken or written holds off until it is done."""

    def __init__(self) -> None:
        self.holds, self.pending = 0, False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.holds:
            self.pending = True
            return
        raise TimeoutError("the test ran past its time limit")

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Defer the alarm for the block; one that fired meanwhile is raised at its end."""
        self.holds += 1
        try:
            yield
        finally:
            self.holds -= 1
        if not self.holds and self.pending:
            self.pending = False
            raise TimeoutError("the test ran past its time limit")


ALARM = _Alarm()


def harden(cfg: dict[str, Any]) -> None:
    """Once, in the zygote: an unprivileged uid when root, not dumpable (no ptrace, no /proc reads), memory cap."""
    if os.geteuid() == 0 and cfg.get("uid"):
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    resource.setrlimit(resource.RLIMIT_AS, (cfg["memory_bytes"], cfg["memory_bytes"]))
    os.listdir(os.path.dirname(os.__file__))  # test code imports the stdlib: it must stay readable as this uid


def run_child(reader: FrameReader, out_fd: int, job: dict[str, Any], key: bytes) -> None:
    """The forked child of one job: no forking of its own, a CPU cap, the alarm, then the tests."""
    code = 0
    secret = job_key(key, bytes.fromhex(str(job["nonce"])))
    inbox, outbox = Sealer(secret, b"host>job"), Sealer(secret, b"job>host")
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
        cpu_s = int(job["cpu_s"]) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        signal.signal(signal.SIGALRM, ALARM)
        write_frame(out_fd, outbox, JOB, {"op": "hello", "pid": os.getpid()})  # the host kills it if it overruns
        Judge(reader, out_fd, job, inbox, outbox).run()
    except BaseException as exc:  # noqa: BLE001 - report, then the child must reach os._exit
        code = 1
        op = "tamper" if isinstance(exc, ChannelTampered) else "crash"
        try:
            write_frame(out_fd, outbox, JOB, {"op": op, "error": f"{type(exc).__name__}: {exc}"[:500]})
        except OSError:
            pass
    finally:
        os._exit(code)


def read_key(fd: int) -> bytes:
    """The judge's key, from the socket the host wrote it to and closed (then ours is closed too)."""
    key = b""
    while len(key) < KEY_BYTES:
        chunk = os.read(fd, KEY_BYTES - len(key))
        if not chunk:
            break
        key += chunk
    os.close(fd)
    if len(key) != KEY_BYTES:
        raise OSError(f"the host sent a {len(key)}-byte key, not {KEY_BYTES}")
    return key


def main() -> None:
    """The zygote: harden, say whether that worked, then fork one child per job frame until the channel closes."""
    in_fd, out_fd = os.dup(0), os.dup(1)
    config = json.loads(sys.argv[1])
    key = read_key(int(config["key_fd"]))
    inbox, outbox = Sealer(key, b"host>zygote"), Sealer(key, b"zygote>host")
    try:
        harden(config)
    except OSError as exc:
        write_frame(
            out_fd, outbox, ZYGOTE, {"op": "error", "error": f"{type(exc).__name__}: {exc}", "python": sys.executable}
        )
        return
    write_frame(out_fd, outbox, ZYGOTE, {"op": "ready"})
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # prints of test code go nowhere; the channel is private
        os.dup2(null, fd)
    reader = FrameReader(in_fd)
    while True:
        try:
            frame = reader.read()
            if frame[:1] == JOB:
                continue  # a late answer to a child that is gone
            if frame[:1] != ZYGOTE:
                raise ChannelTampered(f"a frame of scope {frame[:1]!r}")
            job = json.loads(inbox.open(frame).decode("utf-8"))
        except EOFError:
            return
        except ChannelTampered as exc:  # the stream cannot be trusted any more: say so, and end
            write_frame(out_fd, outbox, ZYGOTE, {"op": "tamper", "error": str(exc)[:500]})
            return
        if not isinstance(job, dict) or job.get("op") != "job":
            continue
        pid = os.fork()
        if pid == 0:
            run_child(reader, out_fd, job, key)
        status = os.waitpid(pid, 0)[1]
        write_frame(out_fd, outbox, ZYGOTE, {"op": "exit", "status": os.waitstatus_to_exitcode(status)})
