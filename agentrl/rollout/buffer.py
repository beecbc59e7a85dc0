"""The durable rollout buffer: a SQLite file (WAL) in the run directory.

It holds in-flight groups (with their partial episodes), complete-but-untrained groups, groups
handed to a trainer step, the dataset cursor and the fingerprints of the model and tokenizer.
Trained, dropped and filtered groups stay until the trainer moves them to the trajectory archive
(``archive.py``), so the buffer, and each checkpoint's copy of it, does not grow with the run.
Invariant: everything a step boundary changes is written in ONE transaction, so a
job killed at any moment resumes from the last boundary with nothing lost and nothing doubled.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from agentrl.errors import RolloutBufferError
from agentrl.trajectory import Episode

BUFFER_FILE = "rollout_buffer.sqlite"  # its name inside a run directory
SCHEMA_VERSION = "1"
GroupState = Literal["inflight", "ready", "handed", "trained", "dropped", "filtered"]
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS groups (
    group_id TEXT PRIMARY KEY, task_id TEXT NOT NULL, seq INTEGER NOT NULL,
    state TEXT NOT NULL, step INTEGER, updated_step INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS episodes (
    episode_id TEXT PRIMARY KEY, group_id TEXT NOT NULL, slot INTEGER NOT NULL,
    status TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS episodes_by_group ON episodes (group_id, slot);
"""


@dataclass
class StoredGroup:
    """One group as the buffer stores it: identity, lifecycle state and its G episodes."""

    group_id: str
    task_id: str
    seq: int
    state: GroupState
    step: int | None = None
    episodes: list[Episode] = field(default_factory=list)


class RolloutBuffer:
    """SQLite-backed store of partial and untrained rollouts (see the module docstring)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # The orchestrator writes boundaries from its thread pool; a lock serialises all access.
            self._conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=30.0, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")  # the boundary must survive a power loss too
            check = self._conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(check)
            self._conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(exc) from exc
        self._check_schema()

    def _corrupt(self, exc: Exception) -> RolloutBufferError:
        return RolloutBufferError(
            f"rollout buffer {self.path} is corrupted or not a SQLite database ({exc}); restore it from a checkpoint "
            "or move it away to start the rollouts afresh (its partial episodes are then lost)"
        )

    def _check_schema(self) -> None:
        stored = self._get_meta("schema_version")
        if stored is None:
            self._put_meta_now("schema_version", SCHEMA_VERSION)
        elif stored != SCHEMA_VERSION:
            raise RolloutBufferError(
                f"rollout buffer {self.path} has schema version {stored}, this agentrl writes {SCHEMA_VERSION}; use a "
                "matching agentrl version or a new run directory"
            )

    def _get_meta(self, key: str) -> str | None:
        try:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(exc) from exc
        return None if row is None else str(row[0])

    def _put_meta_now(self, key: str, value: str) -> None:
        self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def bind_fingerprints(self, fingerprints: dict[str, str]) -> None:
        """Store the fingerprints on first use; afterwards a differing one is an error naming it."""
        stored_text = self._get_meta("fingerprints")
        if stored_text is None:
            self._put_meta_now("fingerprints", json.dumps(fingerprints, sort_keys=True))
            return
        stored = json.loads(stored_text)
        diffs = [
            f"{k}: buffer {stored.get(k)!r} != now {v!r}"
            for k, v in sorted(fingerprints.items())
            if k in stored and stored[k] != v
        ]
        if diffs:
            raise RolloutBufferError(
                f"rollout buffer {self.path} was written with a different setup ({'; '.join(diffs)}); its token ids "
                "and "
                "logprobs are meaningless here. Resume with the original model, tokenizer, chat template and engine "
                "logprob settings, or start a new run directory"
            )

    def fingerprints(self) -> dict[str, str]:
        """The fingerprints stored in the buffer ({} before the first bind)."""
        text = self._get_meta("fingerprints")
        return {} if text is None else dict(json.loads(text))

    def write_boundary(self, step: int, groups: Sequence[StoredGroup], dataset_state: dict[str, Any]) -> None:
        """Persist one step boundary atomically: these groups (replacing their rows) and the cursor."""
        with self._lock:
            self._write_boundary(step, groups, dataset_state)

    def _write_boundary(self, step: int, groups: Sequence[StoredGroup], dataset_state: dict[str, Any]) -> None:
        rows = [
            (g, [(e.episode_id, g.group_id, slot, e.status, e.model_dump_json()) for slot, e in enumerate(g.episodes)])
            for g in groups
        ]
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for group, episode_rows in rows:
                    self._conn.execute("DELETE FROM episodes WHERE group_id = ?", (group.group_id,))
                    self._conn.execute(
                        "INSERT OR REPLACE INTO groups (group_id, task_id, seq, state, step, updated_step) VALUES (?, "
                        "?, ?, ?, ?, ?)",
                        (group.group_id, group.task_id, group.seq, group.state, group.step, step),
                    )
                    self._conn.executemany(
                        "INSERT INTO episodes (episode_id, group_id, slot, status, data) VALUES (?, ?, ?, ?, ?)",
                        episode_rows,
                    )
                self._put_meta_now("dataset", json.dumps(dataset_state, sort_keys=True))
                self._put_meta_now("last_step", str(step))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        except sqlite3.IntegrityError as exc:
            raise RolloutBufferError(
                f"step {step} boundary was not written ({exc}): an episode id appears twice in the groups passed to "
                "write_boundary; give every episode a unique id"
            ) from exc
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(exc) from exc

    def commit_step(self, step: int) -> int:
        """Mark the groups handed out at ``step`` as trained (one transaction); returns how many."""
        try:
            cur = self._conn.execute("UPDATE groups SET state = 'trained' WHERE state = 'handed' AND step = ?", (step,))
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(exc) from exc
        return cur.rowcount

    def delete_groups(self, group_ids: Sequence[str]) -> None:
        """Remove these groups and their episodes (one transaction): the archive holds them now."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for gid in group_ids:
                    self._conn.execute("DELETE FROM episodes WHERE group_id = ?", (gid,))
                    self._conn.execute("DELETE FROM groups WHERE group_id = ?", (gid,))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(exc) from exc

    def load_groups(self, states: Iterable[GroupState] = ("inflight", "ready", "handed")) -> list[StoredGroup]:
        """Groups in the given states with their episodes, oldest first (handed before ready)."""
        wanted = list(states)
        marks = ",".join("?" * len(wanted))
        try:
            group_rows = self._conn.execute(
                f"SELECT group_id, task_id, seq, state, step FROM groups WHERE state IN ({marks}) ORDER BY seq", wanted
            ).fetchall()
            groups = []
            for gid, task_id, seq, state, step in group_rows:
                data = self._conn.execute(
                    "SELECT data FROM episodes WHERE group_id = ? ORDER BY slot", (gid,)
                ).fetchall()
                groups.append(StoredGroup(gid, task_id, seq, state, step, [self._episode(gid, d[0]) for d in data]))
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(exc) from exc
        return groups

    def _episode(self, group_id: str, data: str) -> Episode:
        try:
            return Episode.model_validate_json(data)
        except ValidationError as exc:
            raise RolloutBufferError(
                f"rollout buffer {self.path}: an episode of group {group_id} does not parse "
                f"({exc.errors()[0]['msg']}); the file is corrupted, restore it from a checkpoint"
            ) from exc

    def dataset_state(self) -> dict[str, Any] | None:
        """The dataset cursor state of the last boundary (None before the first)."""
        text = self._get_meta("dataset")
        return None if text is None else dict(json.loads(text))

    def last_step(self) -> int | None:
        """The step of the last boundary written (None before the first)."""
        text = self._get_meta("last_step")
        return None if text is None else int(text)

    def counts(self) -> dict[str, int]:
        """Number of groups per state (for inspection and metrics)."""
        try:
            rows = self._conn.execute("SELECT state, COUNT(*) FROM groups GROUP BY state").fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(exc) from exc
        return {str(s): int(n) for s, n in rows}

    def close(self) -> None:
        """Close the database (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None  # type: ignore[assignment]
