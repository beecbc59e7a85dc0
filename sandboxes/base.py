"""The Sandbox contract shared by every backend: input checks, the request/recover cycle, context use.

Invariant: a timeout, crash or OOM inside the sandbox is returned as an ExecResult and the sandbox
is usable afterwards; only a sandbox that cannot be recovered raises.
"""

from __future__ import annotations

import base64
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from sandboxes.channel import FrameChannel, SessionLostError
from sandboxes.errors import (
    SandboxClosedError,
    SandboxCrashedError,
    SandboxError,
    SandboxFileError,
    SandboxInputError,
    SandboxIsolationError,
    SandboxLeftoverError,
)
from sandboxes.result import ExecResult
from sandboxes.validation import check_code, check_timeout

if TYPE_CHECKING:
    from sandboxes.service import SandboxService

_RESULT_KEYS = ("stdout", "stderr", "exit_code", "timed_out", "oom_killed", "truncated", "duration_s", "restarted")


class Sandbox(ABC):
    """An isolated place to run untrusted code: a stateful Python session plus one-off programs and files."""

    def __init__(self) -> None:
        self._channel: FrameChannel | None = None
        self._closed = False
        # One request at a time: the channel is a single stream, and a sandbox may be shared by threads.
        self._lock = threading.RLock()

    # ---- public contract -------------------------------------------------------------------
    def host_isolation_problem(self) -> str | None:
        """Why code in this sandbox could act as the host's user (open the host processes' pipes through
        ``/proc/<pid>/fd``, read or write the host user's files, signal its processes), or None when it cannot.

        Backends whose code can run under the host's uid override this; a caller that must not be reachable
        from the sandbox (a grader) calls ``require_host_isolation`` first.
        """
        return self.isolation_error

    def require_host_isolation(self, purpose: str) -> None:
        """Raise SandboxIsolationError, naming the problem and the fix, unless the sandbox is isolated from the host's
        user; ``purpose`` says what needs it (e.g. "grading")."""
        problem = self.host_isolation_problem()
        if problem is not None:
            raise SandboxIsolationError(f"{self!r} cannot be used for {purpose}: {problem}")

    def run_python(self, code: str, timeout_s: float) -> ExecResult:
        """Run a cell in the stateful session (variables, imports, files persist until reset())."""
        request = {"op": "run", "code": check_code(code), "timeout_s": check_timeout(timeout_s)}
        return self._run(request, request["timeout_s"])

    def exec(self, argv: list[str], timeout_s: float, stdin: str | None = None) -> ExecResult:
        """Run a one-off program (argv[0] looked up on PATH) in the work dir with its own timeout."""
        if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) for a in argv):
            raise SandboxInputError(f"argv must be a non-empty list of str, got {argv!r}: e.g. ['python3', 'x.py']")
        if stdin is not None and not isinstance(stdin, str):
            raise SandboxInputError(f"stdin must be a str or None, got {type(stdin).__name__}")
        timeout = check_timeout(timeout_s)
        return self._run({"op": "exec", "argv": list(argv), "stdin": stdin, "timeout_s": timeout}, timeout)

    def write_files(self, files: Mapping[str, str | bytes]) -> None:
        """Write files (paths relative to the work dir); str content is encoded as UTF-8."""
        encoded = {}
        for path, data in files.items():
            if not isinstance(path, str) or not isinstance(data, (str, bytes)):
                raise SandboxInputError(f"write_files wants {{str path: str | bytes}}, got {path!r}: {type(data)}")
            raw = data.encode("utf-8") if isinstance(data, str) else data
            encoded[path] = base64.b64encode(raw).decode("ascii")
        self._call({"op": "write", "files": encoded}, self.config.start_timeout_s)

    def read_file(self, path: str) -> bytes:
        """Read a file (relative to the work dir) up to max_read_bytes."""
        if not isinstance(path, str):
            raise SandboxInputError(f"path must be a str, got {type(path).__name__}")
        return base64.b64decode(self._call({"op": "read", "path": path}, self.config.start_timeout_s)["data"])

    def open_service(self, source: str) -> SandboxService:
        """Start a request/response process running Python ``source`` (protocol: ``sandboxes.service``).

        It is a fresh process, not the stateful session: nothing of the session's variables reaches it.
        """
        from sandboxes.service import SandboxService  # lazy: start-up time only (no cycle)

        return SandboxService(self, source)

    def reset(self) -> None:
        """Fresh session: kill every process and service, erase every writable place; the sandbox stays warm.

        A reset that cannot erase everything restarts the sandbox (a fresh container or session process).
        """
        try:
            self._check_reset(self._call({"op": "reset"}, self.config.start_timeout_s))
        except (SessionLostError, SandboxFileError, SandboxLeftoverError):  # nothing of it may be reused
            self._recover()

    @abstractmethod
    def close(self) -> None:
        """Release everything (container or process, temp dirs); idempotent, safe after a failed start."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---- backend hooks -----------------------------------------------------------------------
    config: Any
    # Why code in this sandbox can see the host's filesystem or reach its user (None: it cannot). Graders
    # refuse a sandbox that has one; only the process backend can, where the kernel refuses its namespaces.
    isolation_error: str | None = None

    def _check_reset(self, reply: dict[str, Any]) -> None:
        """Check from the host that a reset left nothing running; SandboxLeftoverError if it did (the sandbox
        is then restarted). The session's reply names the processes it kept (``pids``). Backends that can see
        the sandbox's processes from the host override it."""
        return

    def _stopped_from_outside(self) -> str | None:
        """Why the session was lost, when no code inside the sandbox can cause it (its container killed or
        removed from outside); None when code inside might have (the default: a backend that cannot tell
        blames the code, so a solution never turns its own crash into a retry)."""
        return None

    @abstractmethod
    def _restart(self) -> None:
        """Bring the sandbox back to a fresh running session after the old one was lost (sets _channel)."""

    # ---- shared machinery --------------------------------------------------------------------
    def _call(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        with self._lock:
            return self._call_locked(request, timeout_s)

    def _service_op(self, request: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """A service request (start, call, stop); a refused one raises SandboxCrashedError, a lost session passes."""
        with self._lock:
            return self._call_locked(request, timeout_s or self.config.start_timeout_s, SandboxCrashedError)

    def _call_locked(
        self, request: dict[str, Any], timeout_s: float, error: type[SandboxError] = SandboxFileError
    ) -> dict[str, Any]:
        if self._closed:
            raise SandboxClosedError(f"sandbox {self!r} is closed: create a new one (or acquire from a pool)")
        if self._channel is None:
            self._recover()
        assert self._channel is not None
        reply = self._channel.call(request, timeout_s)
        if not reply.get("ok"):
            raise error(f"sandbox {request['op']} failed: {reply.get('error')}")
        return reply

    def _recover(self) -> str | None:
        """Restart after a lost session; returns why it was lost when nothing inside could have caused it."""
        with self._lock:
            self._channel = None
            outside = self._stopped_from_outside()
            self._restart()
            return outside

    def _run(self, request: dict[str, Any], timeout_s: float) -> ExecResult:
        start = time.monotonic()
        with self._lock:
            try:
                reply = self._call_locked(request, timeout_s + self.config.timeout_margin_s)
            except SessionLostError as exc:
                self._recover()
                return _lost_result(exc, time.monotonic() - start)
        result = {key: reply[key] for key in _RESULT_KEYS}
        return ExecResult(**result, note=_note(result, request, self.config.memory_bytes))


def _lost_result(exc: SessionLostError, elapsed_s: float) -> ExecResult:
    """The result of a run whose session server died or hung (the sandbox was restarted meanwhile)."""
    note = f"the sandbox session was lost ({exc}); the sandbox was restarted: all state and files are gone"
    return ExecResult(timed_out=exc.hung, exit_code=None, restarted=True, note=note, duration_s=elapsed_s)


def _note(result: dict[str, Any], request: dict[str, Any], memory_bytes: int) -> str:
    parts = []
    if result["timed_out"]:
        parts.append(f"timed out after {request['timeout_s']:g}s and was killed")
    if result["oom_killed"]:
        parts.append(f"hit the memory limit ({memory_bytes // (1024 * 1024)} MiB)")
    if result["restarted"]:
        parts.append("the Python session was restarted: variables and imports are lost, files are kept")
    return "; ".join(parts)
