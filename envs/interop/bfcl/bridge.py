"""The agentrl side of the bridge to BFCL: a worker process in BFCL's own venv, spoken to in JSON lines.

``bfcl-eval`` pins numpy 1.26 (agentrl's venv has numpy 2), so it lives in ``.venv-bfcl``
(``scripts/setup_bfcl.sh``) and runs ``envs/interop/bfcl/worker.py`` there. Each env owns one worker,
started on first use; a request that gets no answer within ``timeout_s`` (a simulated API stuck in a
huge computation) kills the worker and raises ``BfclTimeout``; the next request starts a new one.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from agentrl.errors import AgentRLError, PreflightError
from envs.interop.bfcl.worker import PROTOCOL

REPO = Path(__file__).resolve().parents[3]
WORKER = Path(__file__).resolve().with_name("worker.py")
DEFAULT_PYTHON = REPO / ".venv-bfcl" / "bin" / "python"
PYTHON_VARIABLE = "AGENTRL_BFCL_PYTHON"


class BfclError(AgentRLError):
    """The BFCL worker failed a request or died; the message carries its error and the fix."""


class BfclTimeout(BfclError):
    """The BFCL worker did not answer in time; it was killed (the episode's simulated state is gone)."""


def bfcl_python(configured: str | None = None) -> Path:
    """The interpreter of BFCL's venv: ``configured``, else ``$AGENTRL_BFCL_PYTHON``, else ``.venv-bfcl``."""
    return Path(configured or os.environ.get(PYTHON_VARIABLE) or DEFAULT_PYTHON)


class BfclBridge:
    """One BFCL worker process; ``request(op, **fields)`` returns its reply fields or raises ``BfclError``."""

    def __init__(self, python: str | None = None, timeout_s: float = 60.0) -> None:
        self.python = bfcl_python(python)
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: Any = None
        self.hello: dict[str, Any] = {}

    def _start(self) -> subprocess.Popen[bytes]:
        if not self.python.exists():
            raise PreflightError(
                f"BFCL's venv interpreter {self.python} does not exist; run `bash scripts/setup_bfcl.sh` (installs "
                f"bfcl-eval in .venv-bfcl) or set {PYTHON_VARIABLE} / env.kwargs.python to a python that has bfcl-eval"
            )
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [str(self.python), str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=tempfile.gettempdir(),  # BFCL writes nothing for these ops; never into the caller's directory
        )
        self.hello = self._exchange({"op": "hello"})
        if self.hello.get("protocol") != PROTOCOL:
            self.close()
            raise BfclError(
                f"the BFCL worker speaks protocol {self.hello.get('protocol')}, not {PROTOCOL}: stale .pyc?"
            )
        return self._proc

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request; the reply's fields (``BfclError`` when the worker reports an error or dies)."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        return self._exchange({"op": op, **fields})

    def _exchange(self, request: dict[str, Any]) -> dict[str, Any]:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
        except BrokenPipeError as exc:
            raise BfclError(f"the BFCL worker died before {request['op']!r}:{self._stderr_tail()}") from exc
        line = self._read_line(proc, request["op"])
        reply = json.loads(line)
        if not reply.pop("ok"):
            raise BfclError(f"the BFCL worker failed {request['op']!r}: {reply['error']}\n{reply['traceback']}")
        return reply

    def _read_line(self, proc: subprocess.Popen[bytes], op: str) -> bytes:
        assert proc.stdout is not None
        deadline = time.monotonic() + self.timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline:
                    self.close()
                    raise BfclTimeout(f"the BFCL worker did not answer {op!r} within {self.timeout_s:g} s; killed it")
        line = proc.stdout.readline()
        if not line:
            tail = self._stderr_tail()
            self.close()
            raise BfclError(f"the BFCL worker exited during {op!r}:{tail}")
        return line

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        text = self._stderr.read().decode(errors="replace")[-2000:]
        return f"\n{text}" if text else ""

    def close(self) -> None:
        """Stop the worker (its episodes end with it)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc is not None:
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
