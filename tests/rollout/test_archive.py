"""The trajectory archive: trained and dropped groups leave the rollout buffer for per-step gzip files."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest

from agentrl.cli.main import main
from agentrl.errors import RolloutBufferError
from agentrl.rollout.archive import TrajectoryArchive
from agentrl.rollout.buffer import RolloutBuffer, StoredGroup
from agentrl.trajectory import Episode, TokenSegment, TurnRecord


def _group(gid: str, state: str, step: int | None, tokens: list[int]) -> StoredGroup:
    seg = TokenSegment(
        prompt_ids=[1, 2],
        completion_ids=tokens,
        logprobs=[-0.25] * len(tokens),
        loss_mask=[1] * len(tokens),
        turn_ids=[0] * len(tokens),
        versions=[0] * len(tokens),
    )
    turn = TurnRecord(index=0, action="print(1)", finish_reason="stop", reward=1.0, num_tokens=len(tokens))
    episode = Episode(
        episode_id=f"{gid}-e0",
        task_id=f"task-{gid}",
        group_id=gid,
        segments=[seg],
        turns=[turn],
        status="complete",
        messages=[{"role": "user", "content": "go"}],
    )
    return StoredGroup(gid, f"task-{gid}", int(gid[1:]), state, step, [episode])  # type: ignore[arg-type]


def test_finished_groups_move_to_the_archive_and_the_rest_stay(tmp_path: Path) -> None:
    buffer = RolloutBuffer(tmp_path / "rollout_buffer.sqlite")
    groups = [
        _group("g1", "trained", 1, [5, 6]),
        _group("g2", "dropped", None, [7]),
        _group("g3", "ready", None, [8]),
        _group("g4", "inflight", None, [9]),
        _group("g5", "handed", 2, [10]),
    ]
    buffer.write_boundary(1, groups, {"cursor": 5})
    archive = TrajectoryArchive(tmp_path)
    assert archive.archive(buffer, step=1) == 2
    assert buffer.counts() == {"ready": 1, "inflight": 1, "handed": 1}
    assert archive.archive(buffer, step=1) == 0  # nothing new: the file stays as written
    loaded = {g.group_id: g for g in archive.load_groups()}
    assert set(loaded) == {"g1", "g2"} and loaded["g1"].step == 1 and loaded["g2"].state == "dropped"
    assert loaded["g1"].episodes == groups[0].episodes  # tokens, logprobs, turns: byte-identical round trip
    assert buffer.commit_step(2) == 1
    assert archive.archive(buffer, step=2) == 1 and archive.file_for(2).exists()
    assert [g.group_id for g in archive.load_groups()] == ["g1", "g2", "g5"]
    buffer.close()


def test_the_next_steps_dropped_and_filtered_groups_wait_for_their_own_step(tmp_path: Path) -> None:
    """Issue 31.4: in async mode step k+1's collection writes its boundary before step k is archived."""
    buffer = RolloutBuffer(tmp_path / "rollout_buffer.sqlite")
    buffer.write_boundary(1, [_group("g1", "handed", 1, [5]), _group("g2", "dropped", 1, [6])], {})
    next_step = [_group("g3", "handed", 2, [7]), _group("g4", "dropped", 2, [8]), _group("g5", "filtered", 2, [9])]
    buffer.write_boundary(2, next_step, {})  # collection 2 ends while update 1 runs
    buffer.commit_step(1)
    archive = TrajectoryArchive(tmp_path)
    assert archive.archive(buffer, step=1) == 2  # g1, g2; was 4 (g4 and g5 went into step_1's file)
    assert buffer.counts() == {"handed": 1, "dropped": 1, "filtered": 1}
    buffer.commit_step(2)
    assert archive.archive(buffer, step=2) == 3
    with gzip.open(archive.file_for(2), "rt") as handle:
        assert sorted(line.split('"group_id": "')[1][:2] for line in handle) == ["g3", "g4", "g5"]
    buffer.close()


def test_a_group_archived_twice_in_a_crash_window_is_read_once(tmp_path: Path) -> None:
    buffer = RolloutBuffer(tmp_path / "rollout_buffer.sqlite")
    archive = TrajectoryArchive(tmp_path)
    buffer.write_boundary(1, [_group("g1", "trained", 1, [5])], {})
    archive.archive(buffer, step=1)
    # as if the job died after the rename but before the delete: the group is still in the buffer
    buffer.write_boundary(2, [_group("g1", "trained", 1, [5]), _group("g2", "trained", 2, [6])], {})
    archive.archive(buffer, step=2)
    assert sorted(g.group_id for g in archive.load_groups()) == ["g1", "g2"]
    buffer.close()


def test_inspect_shows_archived_groups_by_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    buffer = RolloutBuffer(tmp_path / "rollout_buffer.sqlite")
    buffer.write_boundary(3, [_group("g1", "trained", 3, [5, 6]), _group("g2", "inflight", None, [7])], {})
    TrajectoryArchive(tmp_path).archive(buffer, step=3)
    buffer.close()
    assert main(["inspect", str(tmp_path), "--step", "3"]) == 0
    out = capsys.readouterr().out
    assert "task task-g1" in out and "[trained @ step 3]" in out and "task-g2" not in out
    assert main(["inspect", str(tmp_path)]) == 0
    assert "task-g2" in capsys.readouterr().out


def test_an_unreadable_archive_file_is_named(tmp_path: Path) -> None:
    archive = TrajectoryArchive(tmp_path)
    archive.root.mkdir()
    archive.file_for(4).write_bytes(gzip.compress(b'{"group_id": "g1"')[:-8])  # a truncated file
    with pytest.raises(RolloutBufferError, match="step_000004.jsonl.gz"):
        archive.load_groups()


def test_archive_file_and_its_name_are_on_disk_before_the_buffer_forgets(tmp_path: Path, disk_journal: Any) -> None:
    run_dir = tmp_path.resolve()
    buffer = RolloutBuffer(run_dir / "rollout_buffer.sqlite")
    buffer.write_boundary(1, [_group("g1", "trained", 1, [5])], {})
    deleted: list[int] = []  # the journal's length when the buffer deleted the archived groups
    real_delete = buffer.delete_groups

    def delete_groups(group_ids: list[str]) -> None:
        deleted.append(len(disk_journal.events))
        real_delete(group_ids)

    buffer.delete_groups = delete_groups  # type: ignore[method-assign]
    archive = TrajectoryArchive(run_dir)
    archive.archive(buffer, step=1)
    buffer.close()
    final = archive.file_for(1)
    tmp = final.with_name(f".{final.name}.tmp")
    published = disk_journal.index("replace", f"{tmp} -> {final}")
    assert disk_journal.index("fsync", run_dir) < published  # the new trajectories/ entry
    assert disk_journal.fsynced(tmp) < published < disk_journal.fsynced(archive.root) < deleted[0]
