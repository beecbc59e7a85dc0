"""The trajectory archive: trained, dropped and filtered groups, moved out of the rollout buffer after each step.

The buffer holds what a resumed job still needs (partial, ready and handed groups); once a step is
trained, its groups are only a record of the run. Keeping them in the buffer would make the buffer,
and the copy of it in every checkpoint, grow with every step (about 30 bytes per token). The trainer
moves them here instead: one gzip JSON-lines file per step, ``trajectories/step_XXXXXX.jsonl.gz``,
one group per line, written under a temporary name, fsynced and renamed (``agentrl.util.disk.publish``),
then deleted from the buffer.

Crash safety: a job killed between the rename and the delete leaves the groups in both places; a
resume restores the buffer of the last checkpoint (taken after the delete) and rewrites the files of
the steps it redoes, and readers drop duplicate group ids, so no group is lost or counted twice.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from agentrl.errors import RolloutBufferError
from agentrl.rollout.buffer import RolloutBuffer, StoredGroup
from agentrl.trajectory import Episode
from agentrl.util.disk import fsync_path, publish

ARCHIVE_DIR = "trajectories"  # its name inside a run directory


class TrajectoryArchive:
    """Per-step gzip JSONL files of finished (trained or dropped) groups under ``run_dir/trajectories``."""

    def __init__(self, run_dir: str | Path) -> None:
        self.root = Path(run_dir) / ARCHIVE_DIR

    def file_for(self, step: int) -> Path:
        """The archive file of ``step``."""
        return self.root / f"step_{step:06d}.jsonl.gz"

    def archive(self, buffer: RolloutBuffer, step: int) -> int:
        """Move the trained, dropped and filtered groups of steps up to ``step`` into ``step``'s file; returns how many.

        In async mode step k+1's collection has already written its dropped and filtered groups when step k
        ends; they stay in the buffer until step k+1 is archived (a group with no step, from an older buffer,
        goes now).
        """
        finished = buffer.load_groups(("trained", "dropped", "filtered"))
        groups = [g for g in finished if g.step is None or g.step <= step]
        if not groups:
            return 0
        if not self.root.is_dir():
            self.root.mkdir(parents=True)
            fsync_path(self.root.parent)  # the new trajectories/ entry must survive a power loss too
        final = self.file_for(step)
        tmp = final.with_name(f".{final.name}.tmp")
        lines = "".join(json.dumps(_group_record(g)) + "\n" for g in groups).encode("utf-8")
        with open(tmp, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=3) as packed:  # level 3: most of the gain
                packed.write(lines)
        publish(tmp, final)  # file and name on disk before the buffer forgets the groups
        buffer.delete_groups([g.group_id for g in groups])
        return len(groups)

    def load_groups(self) -> list[StoredGroup]:
        """Every archived group, oldest step first; a group id seen twice (a crash window) counts once."""
        if not self.root.is_dir():
            return []
        found: dict[str, StoredGroup] = {}
        for path in sorted(self.root.glob("step_*.jsonl.gz")):
            try:
                with gzip.open(path, "rt", encoding="utf-8") as handle:
                    for line in handle:
                        if line.strip():
                            group = _group_from_record(json.loads(line))
                            found[group.group_id] = group
            except (OSError, EOFError, ValueError) as exc:
                raise RolloutBufferError(
                    f"trajectory archive file {path} is unreadable ({exc}); move it away to read the others"
                ) from exc
        return list(found.values())


def _group_record(group: StoredGroup) -> dict[str, object]:
    return {
        "group_id": group.group_id,
        "task_id": group.task_id,
        "seq": group.seq,
        "state": group.state,
        "step": group.step,
        "episodes": [e.model_dump(mode="json") for e in group.episodes],
    }


def _group_from_record(record: dict) -> StoredGroup:
    episodes = [Episode.model_validate(e) for e in record["episodes"]]
    return StoredGroup(
        record["group_id"], record["task_id"], int(record["seq"]), record["state"], record["step"], episodes
    )
