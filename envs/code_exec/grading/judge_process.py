"""The host's handle on the judge: a long-lived zygote process, one forked child per grading job.

Frames are length-prefixed, authenticated JSON over the zygote's stdin/stdout (seal.py: a key per zygote,
handed over a socket pair, one derived per job); every wait has a deadline, and a child that overruns is
killed (the zygote then reports its exit, so the stream stays in step). A zygote that died, or whose
stream carried a frame that is not genuine, is restarted on the next job.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import time
from typing import Any, NoReturn

from envs.code_exec.grading.result import GradingError, GradingSetupError
from envs.code_exec.grading.seal import JOB, KEY_BYTES, ZYGOTE, ChannelTampered, Sealer, job_key
from envs.code_exec.grading.sources import judge_source
from sandboxes.session.fdwait import readable

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
MAX_FRAME_BYTES = 64 << 20


class JudgeLost(GradingError):
    """The judge process closed its channel (it died, or was killed)."""


class JudgeTimeout(GradingError):
    """The judge did not send its next message in time."""


class JudgeTampered(GradingError):
    """A frame on the judge's channel was not genuine (forged, replayed, out of order, oversized): the zygote is
    stopped, since its stream can no longer be trusted, and the grading is void."""


class JudgeProcess:
    """Starts the zygote on first use; ``run_job`` hands it a job, then ``send``/``receive`` talk to the child."""

    def __init__(self, python: str, uid: int, memory_bytes: int) -> None:
        self.python, self.uid, self.memory_bytes = python, uid, memory_bytes
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = bytearray()
        self._child: int | None = None
        self._open = False
        self._key = b""
        self._zygote_in = self._zygote_out = self._job_in = self._job_out = Sealer(b"", b"")

    def _start(self) -> subprocess.Popen[bytes]:
        python = shutil.which(self.python, path=SAFE_PATH) or shutil.which(self.python)
        if python is None:
            raise GradingSetupError(
                f"judge interpreter {self.python!r} not found on {SAFE_PATH}: set grading judge_python"
            )
        # The key never appears in argv, the environment or a pipe (all reachable through /proc by a process of
        # our uid): it crosses a socket pair whose ends are closed here once it is written.
        self._key = secrets.token_bytes(KEY_BYTES)
        self._zygote_in, self._zygote_out = Sealer(self._key, b"zygote>host"), Sealer(self._key, b"host>zygote")
        ours, theirs = socket.socketpair()
        try:
            config = json.dumps({"uid": self.uid, "memory_bytes": self.memory_bytes, "key_fd": theirs.fileno()})
            # -I -S: no environment variables, user site or site-packages reach the judge; stdlib only.
            proc = subprocess.Popen(
                [python, "-I", "-S", "-c", judge_source(), config],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd="/",
                env={"PATH": SAFE_PATH, "LANG": "C.UTF-8"},
                start_new_session=True,
                pass_fds=(theirs.fileno(),),
            )
            ours.sendall(self._key)
        finally:
            ours.close()
            theirs.close()
        return proc

    def start_job(self, job: dict[str, Any]) -> None:
        """Hand the zygote one job (restarting it if it died); the child's messages follow."""
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._proc, self._buf = self._start(), bytearray()
            self._await_ready()
        self._child, self._open = None, True
        nonce = secrets.token_bytes(16)
        secret = job_key(self._key, nonce)
        self._job_in, self._job_out = Sealer(secret, b"job>host"), Sealer(secret, b"host>job")
        self._write(self._zygote_out.seal(ZYGOTE, json.dumps({"op": "job", "nonce": nonce.hex(), **job}).encode()))

    def _await_ready(self) -> None:
        try:
            first = self.receive(time.monotonic() + 30.0)
        except GradingError as exc:
            self.close()
            raise GradingSetupError(f"the judge process ({self.python}) did not start: {exc}") from exc
        if first.get("op") != "ready":
            self.close()
            raise GradingSetupError(
                f"the judge ({first.get('python')}) cannot harden itself: {first.get('error')}; set GraderConfig."
                "judge_python to an interpreter whose standard library the judge's uid can read (e.g. "
                "/usr/bin/python3), or run the trainer as a user other than root"
            )

    def send(self, message: dict[str, Any]) -> None:
        """One frame of the job to the zygote's stdin (the current child reads it)."""
        self._write(self._job_out.seal(JOB, json.dumps(message).encode("utf-8")))

    def _write(self, data: bytes) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(struct.pack(">I", len(data)) + data)
            self._proc.stdin.flush()
        except OSError as exc:
            raise JudgeLost(f"the judge stopped reading: {exc}") from exc

    def receive(self, deadline: float) -> dict[str, Any]:
        """The next message of the job, by ``deadline`` (monotonic seconds)."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while True:
            if len(self._buf) >= 4:
                (size,) = struct.unpack(">I", self._buf[:4])
                if size > MAX_FRAME_BYTES:
                    self._tampered(f"a {size}-byte frame on the judge's channel")
                if len(self._buf) >= 4 + size:
                    frame = bytes(self._buf[4 : 4 + size])
                    del self._buf[: 4 + size]
                    return self._note(self._open_frame(frame))
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not readable(fd, remaining):
                raise JudgeTimeout("the judge did not answer in time")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._open = False
                raise JudgeLost("the judge process exited")
            self._buf += chunk

    def _open_frame(self, frame: bytes) -> dict[str, Any]:
        """The message of a genuine frame; anything else stops the zygote and raises JudgeTampered."""
        sealer = {ZYGOTE: self._zygote_in, JOB: self._job_in}.get(frame[:1])
        try:
            if sealer is None:
                raise ChannelTampered(f"a frame of unknown scope {frame[:1]!r}")
            message = json.loads(sealer.open(frame).decode("utf-8"))
        except (ChannelTampered, ValueError) as exc:  # a frame that verified is the judge's JSON: never ValueError
            self._tampered(str(exc))
        if type(message) is not dict:
            self._tampered("a judge message that is not an object")
        return message

    def _tampered(self, detail: str) -> NoReturn:
        self.kill_child()
        self.close()
        raise JudgeTampered(detail)

    def _note(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("op") == "hello":
            self._child = message.get("pid")
        if message.get("op") == "exit":
            self._open = False
        if message.get("op") == "tamper":  # the judge saw a frame from us that was not genuine
            self._tampered(f"the judge received a frame that is not genuine ({message.get('error')})")
        return message

    def finish_job(self, *, abort: bool = False, timeout_s: float = 5.0) -> None:
        """Read up to the zygote's report that the job's child ended, so the next job starts clean; ``abort``
        kills the child first (the solution failed to load, so its tests need not run)."""
        deadline = time.monotonic() + timeout_s
        while self._open:
            if abort:
                self.kill_child()
            try:
                self.receive(deadline)
            except JudgeTimeout:
                self.close()  # a zygote that cannot report its child's end is restarted next time
                return
            except (JudgeLost, JudgeTampered):
                return

    def kill_child(self) -> None:
        """Stop the current job's child (it overran); the zygote reaps it and reports."""
        if self._child is not None:
            try:
                os.kill(self._child, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> None:
        """Stop the zygote (closing its stdin ends it); idempotent."""
        proc, self._proc, self._open = self._proc, None, False
        if proc is None:
            return
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
