"""What the kill-and-resume tests share: start a real ``agentrl rollout`` job, read the partial episodes it
stored and the steps it logged (read-only, while it runs), wait for a condition while the job is alive, and
SIGKILL it."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from agentrl.trajectory import Episode


def start_rollout(
    config: Path, out: Path, log: Path, *extra: str, path: Sequence[Path] = ()
) -> subprocess.Popen[bytes]:
    """``agentrl rollout CONFIG --out OUT [extra]`` in a subprocess, its output appended to ``log``."""
    env = dict(os.environ)
    if path:  # folders the job imports from (an env module or agent program living next to the test)
        env["PYTHONPATH"] = os.pathsep.join([*map(str, path), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "agentrl.cli.main", "rollout", str(config), "--out", str(out), *extra]
    return subprocess.Popen(cmd, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def stored_partials(db: Path) -> list[Episode]:
    """The partial episodes in the SQLite buffer ``db``; [] while it or its tables do not exist yet."""
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0) as conn:
            rows = conn.execute("SELECT data FROM episodes WHERE status = 'partial'").fetchall()
    except sqlite3.OperationalError:  # tables not created yet
        return []
    return [Episode.model_validate_json(row[0]) for row in rows]


def logged_steps(run_dir: Path) -> list[int]:
    """The training steps ``metrics.jsonl`` recorded so far, in order (held-out evaluation records excluded).

    Read while the job may be appending: a last line without its newline is still being written and is left out.
    """
    path = run_dir / "metrics.jsonl"
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    complete = text[: text.rfind("\n") + 1]
    records = [json.loads(line) for line in complete.splitlines() if line.strip()]
    return [r["step"] for r in records if "episode/reward_mean" in r]


def wait_while_alive(
    condition: Callable[[], bool], proc: subprocess.Popen[bytes], log: Path, what: str, timeout_s: float = 240
) -> None:
    """Poll ``condition`` until it holds; fail (with the job's log) if the job ends first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, f"the job ended before {what}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"not {what} within {timeout_s:.0f} s"
        time.sleep(0.01)


def sigkill(proc: subprocess.Popen[bytes]) -> None:
    """Kill the job as a node failure would: no handler runs, nothing is flushed."""
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
