"""The solution's side of grading: loads the program in a fresh sandbox process and answers calls as plain data.

Runs as a sandbox service (stdlib only; shipped with wire.py and monitor.py). Whatever this process
sends back is only ever the solution's own answer: the tests and the verdict live outside the sandbox.
Values the codec cannot carry stay here and cross as references the judge can call, iterate or read.
"""

from __future__ import annotations

import os
import struct
import sys
import types
from typing import Any

from envs.code_exec.grading.monitor import Monitor
from envs.code_exec.grading.wire import TAG, Decoder, Encoder, WireError, describe_exception, dumps, loads

SOLUTION_FILE = "<solution>"
_STDLIB = frozenset(sys.stdlib_module_names) | {"builtins"}
_PROBE_EQ = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__")
# Exact builtin types whose subclasses cross as a plain copy of their base value (so a custom __eq__ is lost).
_PLAIN_OF = (
    (str, str.__str__),
    (int, int.__int__),
    (float, float.__float__),
    (complex, complex.__complex__),
    (bytes, bytes.__bytes__),
    (list, lambda v: list(list.__iter__(v))),
    (tuple, lambda v: tuple(tuple.__iter__(v))),
    (dict, lambda v: dict(dict.items(v))),
    (set, lambda v: set(set.__iter__(v))),
    (frozenset, lambda v: frozenset(frozenset.__iter__(v))),
)
_EXACT_CONTAINERS = (list, tuple, dict, set, frozenset)


class SolutionServer:
    """One loaded solution: its namespace, the objects handed out as references, and the request ops."""

    def __init__(self, monitor: Monitor) -> None:
        self.monitor = monitor
        # A real module, so tools that look the module up (dataclasses, typing, pickle) work as in a script.
        module = types.ModuleType("__solution__")
        sys.modules[module.__name__] = module
        self.namespace: dict[str, Any] = vars(module)
        self.refs: dict[int, Any] = {}
        self.encoder = Encoder(self.fallback)
        self.decoder = Decoder(self.resolve)

    def handle(self, request: Any) -> dict[str, Any]:
        """Answer one request; an exception of the solution is part of the answer, never the server's end."""
        op = getattr(self, "op_" + str(request.get("op") if isinstance(request, dict) else ""), None)
        if op is None:
            return {"error": "malformed request"}
        try:
            return op(request)
        except WireError as exc:
            return {"error": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - SystemExit and friends are the solution's answer too
            if not isinstance(exc, Exception):
                self.monitor.flag("process_exit", f"{type(exc).__name__} raised by the solution")
            return {"raise": describe_exception(exc)}
        finally:
            self.monitor.check_builtins()

    # ---- references -----------------------------------------------------------------------------
    def fallback(self, value: Any) -> Any:
        """A value the codec cannot carry: a plain copy of a builtin subclass (encoded at the depth where it was
        met, so the depth cap holds), else a reference (an exact container past the depth cap or in a cycle too)."""
        kind = type(value)
        if kind not in _EXACT_CONTAINERS:
            self.probe(value, kind)
            for base, plain in _PLAIN_OF:
                if isinstance(value, base) and kind is not bool:
                    return self.encoder.encode(plain(value), self.encoder.depth)
        self.refs[id(value)] = value
        return {TAG: "ref", "id": id(value), "type": kind.__qualname__[:80], "callable": callable(value)}

    def probe(self, value: Any, kind: type) -> None:
        """Flag values that claim equality with unrelated values, or builtin subclasses overriding comparison."""
        own = [c for c in kind.__mro__[:-1] if c.__module__.split(".")[0] not in _STDLIB]
        overridden = sorted({name for c in own for name in _PROBE_EQ if name in vars(c)})
        if overridden and any(issubclass(kind, base) for base, _ in _PLAIN_OF):
            self.monitor.flag("custom_comparison", f"{kind.__qualname__} overrides {', '.join(overridden)}")
            return
        for probe in (object(), "\x00agentrl-probe", -7_654_321_987, [object()]):
            try:
                claims = value == probe
                equal = claims is not NotImplemented and bool(claims)
            except Exception:  # noqa: BLE001 - a comparison that raises claims nothing
                continue
            if equal:
                self.monitor.flag("custom_comparison", f"{kind.__qualname__} compares equal to unrelated values")
                return

    def resolve(self, data: dict[str, Any]) -> Any:
        """The object behind a reference the judge sent back."""
        ref = data.get("id")
        if type(ref) is not int or ref not in self.refs:
            raise WireError("unknown reference (the solution's process was restarted?)")
        return self.refs[ref]

    def target(self, request: dict[str, Any]) -> Any:
        """The object a request addresses: a top-level name of the solution, or a reference."""
        if "name" in request:
            name = request["name"]
            if not isinstance(name, str) or name not in self.namespace:
                raise NameError(f"name {name!r} is not defined")
            return self.namespace[name]
        return self.resolve(request)

    def reply(self, value: Any) -> dict[str, Any]:
        """A value as the answer of a request."""
        return {"value": self.encoder.encode(value)}

    # ---- ops ------------------------------------------------------------------------------------
    def op_load(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run the program (task prefix + solution) once in the fresh namespace."""
        exec(compile(request["program"], SOLUTION_FILE, "exec"), self.namespace)
        return {"loaded": True}

    def op_call(self, request: dict[str, Any]) -> dict[str, Any]:
        """Call a function (or reference) with decoded arguments; report the arguments it mutated."""
        function = self.target(request)
        raw_args, raw_kwargs = request["args"], request["kwargs"]
        args = [self.decoder.decode(item) for item in raw_args]
        kwargs = {name: self.decoder.decode(item) for name, item in raw_kwargs}
        answer = self.reply(function(*args, **kwargs))
        mutated = {}
        for key, value, raw in [*zip(range(len(args)), args, raw_args), *((n, kwargs[n], r) for n, r in raw_kwargs)]:
            if type(value) in (list, dict, set, bytearray):
                now = self.encoder.encode(value)
                if now != raw:
                    mutated[str(key)] = now
        if mutated:
            answer["mutated"] = mutated
        return answer

    def op_getattr(self, request: dict[str, Any]) -> dict[str, Any]:
        """A (non-dunder) attribute of a referenced object."""
        name = request["attr"]
        if not isinstance(name, str) or name.startswith("__"):
            raise AttributeError(f"attribute {name!r} cannot be read across the grading boundary")
        return self.reply(getattr(self.target(request), name))

    def op_next(self, request: dict[str, Any]) -> dict[str, Any]:
        """The next item of a referenced iterator; ``stop`` when it is exhausted."""
        try:
            return self.reply(next(self.target(request)))
        except StopIteration:
            return {"stop": True}

    def op_iter(self, request: dict[str, Any]) -> dict[str, Any]:
        """An iterator over a referenced object (always a reference, never a copy)."""
        iterator = iter(self.target(request))
        self.refs[id(iterator)] = iterator
        return {"value": {TAG: "ref", "id": id(iterator), "type": type(iterator).__qualname__[:80], "callable": False}}

    def op_special(self, request: dict[str, Any]) -> dict[str, Any]:
        """len, bool, str, repr, getitem or contains of a referenced object."""
        target, how = self.target(request), request["how"]
        key = self.decoder.decode(request.get("key"))
        answers = {"len": len, "bool": bool, "str": str, "repr": repr}
        if how in answers:
            return self.reply(answers[how](target))
        if how == "getitem":
            return self.reply(target[key])
        if how == "contains":
            return self.reply(key in target)
        raise ValueError(f"unknown operation {how!r}")


def _read_exact(fd: int, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main() -> None:
    """Serve the grading requests on fds 0/1; the solution's own prints and stdin go to /dev/null."""
    sys.dont_write_bytecode = True  # no .pyc writes, which would look like file writes
    requests, replies, flags = os.dup(0), os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    sys.stdin, sys.stdout, sys.stderr = open(os.devnull), open(os.devnull, "w"), open(os.devnull, "w")
    monitor = Monitor(flags)
    monitor.install()
    server = SolutionServer(monitor)
    count = 0
    while True:
        try:
            (size,) = struct.unpack(">I", _read_exact(requests, 4))
            text = _read_exact(requests, size).decode("utf-8")
        except EOFError:
            return
        try:
            answer = server.handle(loads(text))
        except WireError as exc:
            answer = {"error": str(exc)}
        data = dumps(answer).encode("utf-8")
        count += 1
        monitor.beat(count)
        _write_all(replies, struct.pack(">I", len(data)) + data)
