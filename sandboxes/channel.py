"""Length-prefixed JSON frames between the host and the session server, over pipes or a Docker exec socket.

A Docker exec socket without a TTY multiplexes stdout/stderr in 8-byte-header frames; the channel
demultiplexes them, keeps stdout for the protocol and a bounded tail of the server's stderr for errors.
"""

from __future__ import annotations

import json
import os
import struct
import time
from typing import Any

from sandboxes.errors import SandboxCrashedError
from sandboxes.session.fdwait import readable, writable

_STDERR_TAIL = 4096


class SessionLostError(SandboxCrashedError):
    """The session server closed the channel or did not answer in time (internal: triggers recovery)."""

    def __init__(self, message: str, *, hung: bool = False) -> None:
        super().__init__(message)
        self.hung = hung


def max_frame_bytes(max_output_bytes: int, max_read_bytes: int) -> int:
    """Largest legitimate reply: two capped streams JSON-escaped (<= 12 bytes a char) or one base64 file."""
    return 24 * max_output_bytes + 2 * max_read_bytes + (1 << 20)


class FrameChannel:
    """Request/response calls to one session server; not thread-safe (a sandbox is used by one caller)."""

    def __init__(
        self, read_fd: int, write_fd: int, *, docker_mux: bool, max_frame_bytes: int, keepalive: Any = None
    ) -> None:
        self._read_fd, self._write_fd, self._mux = read_fd, write_fd, docker_mux
        self._max_frame = max_frame_bytes  # the host never trusts the sandbox's sizes
        self._keepalive = keepalive  # the socket/process object owning the fds must outlive them
        self._raw = bytearray()
        self._buf = bytearray()
        self.server_stderr = bytearray()

    def call(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one request and wait at most timeout_s for its reply."""
        data = json.dumps(request).encode("utf-8")
        try:
            self._write(struct.pack(">I", len(data)) + data)
        except OSError as exc:
            raise SessionLostError(f"session channel broken while sending: {exc}") from exc
        deadline = time.monotonic() + timeout_s
        (size,) = struct.unpack(">I", self._read(4, deadline))
        if size > self._max_frame:
            raise SessionLostError(f"session server sent a {size}-byte frame (limit {self._max_frame}): hostile?")
        try:
            reply = json.loads(self._read(size, deadline).decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON (a cell can reach the server's stdout)
            raise SessionLostError(f"session server sent a malformed frame: {exc}") from exc
        if not isinstance(reply, dict):
            raise SessionLostError(f"session server sent a {type(reply).__name__} frame, not an object")
        return reply

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if not writable(self._write_fd, 30.0):
                raise SessionLostError("session server stopped reading its requests for 30 s")
            view = view[os.write(self._write_fd, view) :]

    def _read(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not readable(self._read_fd, remaining):
                raise SessionLostError("session server did not answer in time", hung=True)
            try:
                chunk = os.read(self._read_fd, 1 << 16)
            except OSError as exc:
                raise SessionLostError(f"session channel broken: {exc}") from exc
            if not chunk:
                raise SessionLostError(f"session server exited; its stderr: {self.stderr_tail()!r}")
            if self._mux:
                self._demux(chunk)
            else:
                self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _demux(self, chunk: bytes) -> None:
        self._raw += chunk
        while len(self._raw) >= 8:
            stream, size = self._raw[0], struct.unpack(">I", self._raw[4:8])[0]
            if size > self._max_frame:
                raise SessionLostError(f"Docker stream frame of {size} bytes exceeds {self._max_frame}")
            if len(self._raw) < 8 + size:
                return
            payload = self._raw[8 : 8 + size]
            del self._raw[: 8 + size]
            if stream == 1:
                self._buf += payload
            else:
                self.server_stderr = (self.server_stderr + payload)[-_STDERR_TAIL:]

    def stderr_tail(self) -> str:
        """The last few KB the session server wrote to its stderr (for error messages)."""
        return self.server_stderr.decode("utf-8", errors="replace")
