"""The tracebacks of env failures: printed to stderr and kept in the run directory, so an env that raises
leaves the file and line that raised, not only the exception's text in the drop alarm.

Each distinct failure (exception type and message) is printed once per job; the last ``keep_last``
tracebacks are files ``env_errors/<time ns>-<episode>.txt`` (older ones are deleted).
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from pathlib import Path

from agentrl.trajectory import Episode

ENV_ERRORS_DIR = "env_errors"
KEEP_TRACEBACKS = 5


class TracebackLog:
    """Keeps the last ``keep_last`` env tracebacks under ``run_dir/env_errors`` and prints each new kind once."""

    def __init__(self, run_dir: Path, keep_last: int = KEEP_TRACEBACKS) -> None:
        self.directory = run_dir / ENV_ERRORS_DIR
        self.keep_last = keep_last
        self._printed: set[str] = set()
        self._lock = threading.Lock()

    def keep(self, exc: BaseException, episode: Episode) -> Path:
        """Write ``exc``'s traceback for ``episode`` and return the file; the first of its kind is also printed."""
        text = "".join(traceback.format_exception(exc))
        header = f"episode {episode.episode_id} task {episode.task_id!r} seed {episode.seed}\n"
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"{time.time_ns()}-{episode.episode_id[:12]}.txt"
            path.write_text(header + text, encoding="utf-8")
            for old in sorted(self.directory.glob("*.txt"))[: -self.keep_last]:
                old.unlink(missing_ok=True)
            kind = f"{type(exc).__name__}: {exc}"
            first = kind not in self._printed
            self._printed.add(kind)
        if first:
            print(f"[rollout] an env raised (kept in {path}):\n{text.rstrip()}", file=sys.stderr, flush=True)
        return path
