"""Ctrl-C and SIGTERM during training: the first ends the job at the next step boundary, a second aborts at once.

Inside the step loop the first SIGINT/SIGTERM only records a stop request; the loop finishes its
step (rollout, update, weight sync, buffer commit, archive), checkpoints it and ends. A second
signal raises ``KeyboardInterrupt`` where the job is, so the last checkpoint stays what a resume
starts from. Outside the loop (the held-out evaluations before and after training) there is no step
boundary to wait for and no training to save, so a signal aborts at once there.

A signal repeated within ``repeat_window_s`` counts as the first one: Ctrl-C in a terminal reaches
every torchrun worker directly *and* through torchrun, which forwards it a moment later.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingStopped(KeyboardInterrupt):
    """Training ended early, at a step boundary with a checkpoint, because a stop signal arrived.

    A ``KeyboardInterrupt`` (so ``agentrl`` exits 130) and not an error: the run is resumable.
    """


class StopSignals:
    """Installs SIGINT/SIGTERM handlers for the duration of a ``with`` block (main thread only)."""

    def __init__(self, *, resume_hint: str = "", repeat_window_s: float = 0.5) -> None:
        self.resume_hint = resume_hint
        self.repeat_window_s = repeat_window_s
        self.requested: str | None = None  # the name of the first stop signal received while graceful
        self._graceful = False
        self._first_at = 0.0
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():  # signal.signal only works there
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    @contextlib.contextmanager
    def graceful(self) -> Iterator[None]:
        """Within this block a first signal asks for a stop at the next step boundary instead of aborting."""
        self._graceful = True
        try:
            yield
        finally:
            self._graceful = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        if self._graceful and self.requested is not None and now - self._first_at < self.repeat_window_s:
            return  # the same Ctrl-C, forwarded by torchrun
        if self._graceful and self.requested is None:
            self.requested, self._first_at = name, now
            _say(
                f"[train] {name}: stopping after the current step with a checkpoint; "
                "send it again (Ctrl-C) to abort at once"
            )
            return
        where = "a second stop signal" if self.requested else "not inside a training step"
        _say(
            f"[train] {name} ({where}): aborting now; the last checkpoint, if any, stays resumable. {self.resume_hint}"
        )
        raise KeyboardInterrupt(name)


def _say(text: str) -> None:
    # os.write, not print: a handler may run while the main thread is inside a print to the same stream.
    os.write(2, (text.rstrip() + "\n").encode("utf-8", "replace"))
