"""``agentrl inspect`` output, the rollout CLI's torn-line repair, and bad ``--resume`` input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentrl.cli.main import main
from agentrl.cli.rollout import _written_groups
from agentrl.rollout.buffer import RolloutBuffer, StoredGroup
from agentrl.trajectory import Episode, TokenSegment, TurnRecord
from agentrl.util.jsonl import jsonl_lines


def _episode(eid: str, status: str, versions: list[int]) -> Episode:
    n = len(versions)
    seg = TokenSegment(
        prompt_ids=[1, 2],
        completion_ids=[5] * n,
        logprobs=[-0.5] * n,
        loss_mask=[1] * n,
        turn_ids=[0] * 3 + [1] * (n - 3),
        versions=versions,
    )
    turns = [
        TurnRecord(
            index=0,
            action="x = 1",
            finish_reason="stop",
            reward=1.0,
            num_tokens=3,
            env_messages=[{"role": "user", "content": ">>> ok"}],
        ),
        TurnRecord(index=1, action="", finish_reason="abort", num_tokens=n - 3),
    ]
    return Episode(
        episode_id=eid,
        task_id="task-0",
        group_id="g0",
        segments=[seg],
        turns=turns,
        status=status,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "Task task-0"}],
        resumed=1,
    )


def test_inspect_prints_turns_versions_rewards_and_partials(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    buffer = RolloutBuffer(tmp_path / "rollout_buffer.sqlite")
    buffer.write_boundary(
        3,
        [StoredGroup("g0", "task-0", 0, "inflight", None, [_episode("abc", "partial", [0, 0, 0, 1, 2])])],
        {"cursor": 1},
    )
    buffer.close()
    assert main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "task task-0" in out and "[inflight]" in out and "status partial" in out and "resumed x1" in out
    assert "turn 0  3 tokens  v0  finish stop  reward 1.000" in out and "'>>> ok'" in out
    assert "turn 1  2 tokens  v1..v2  finish abort  not stepped  (partial turn)" in out
    jsonl = tmp_path / "episodes.jsonl"
    jsonl.write_text(_episode("def", "complete", [4, 4, 4, 4]).model_dump_json() + "\n")
    assert main(["inspect", str(jsonl)]) == 0
    assert "status complete" in capsys.readouterr().out


def test_written_groups_cuts_a_torn_last_line(tmp_path: Path) -> None:
    out = tmp_path / "episodes.jsonl"
    whole = json.dumps({"group_id": "g1"}) + "\n"
    out.write_text(whole + '{"group_id": "g2", "tok')  # the job was killed mid-write
    assert _written_groups(out) == {"g1"} and out.read_text() == whole


def test_episodes_whose_text_holds_unicode_line_separators_read_back(tmp_path: Path, capsys: Any) -> None:
    """JSON writers leave U+2028, U+2029 and U+0085 raw inside strings; str.splitlines breaks lines there (a
    killed rollout job's resume crashed on such an episode sampled by a random-weight model, CI 2026-12-05)."""
    episode = _episode("sep", "complete", [0, 0, 0, 0])
    episode.turns[0].action = "a\u2028b\u2029c\x85d\x1ce"
    line = episode.model_dump_json()
    assert len(line.splitlines()) > 1  # the trap is real: this line would split
    out = tmp_path / "episodes.jsonl"
    out.write_text(line + "\n" + '{"group_id": "torn', encoding="utf-8")
    assert _written_groups(out) == {episode.group_id}
    assert main(["inspect", str(out)]) == 0
    assert "status complete" in capsys.readouterr().out


def test_resume_from_a_corrupted_buffer_is_a_clear_error(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "rollout_buffer.sqlite").write_bytes(b"\x00garbage" * 512)
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model": {"path": str(tiny_model_dir)},
                "env": {"id": "rollout_test_envs:Scratchpad", "import_modules": []},
                "trainer": {"mini_batches": 1},
            }
        )
    )
    assert main(["rollout", str(config), "--out", str(tmp_path / "o.jsonl"), "--resume", str(run_dir)]) != 0
    assert "corrupted or not a SQLite database" in capsys.readouterr().err
    assert (
        main(["rollout", str(config), "--out", str(tmp_path / "o.jsonl"), "--resume", str(tmp_path / "nowhere")]) != 0
    )
    assert "no rollout_buffer.sqlite" in capsys.readouterr().err


def test_rollout_moves_finished_groups_out_of_its_buffer(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agentrl.rollout.archive import TrajectoryArchive

    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model": {"path": str(tiny_model_dir)},
                "engine": {"kind": "embedded", "max_seq_len": 512},
                "env": {"id": "rollout_test_envs:Scratchpad", "kwargs": {"num_tasks": 8}, "import_modules": []},
                "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 4, "max_episode_tokens": 256},
                "trainer": {"mini_batches": 1},
                "logging": {"run_root": str(tmp_path / "runs"), "run_name": "r", "wandb_mode": "disabled"},
            }
        )
    )
    out, run_dir = tmp_path / "episodes.jsonl", tmp_path / "runs" / "r"
    assert main(["rollout", str(config), "--out", str(out), "--steps", "3"]) == 0
    buffer = RolloutBuffer(run_dir / "rollout_buffer.sqlite")
    counts = buffer.counts()  # three steps of 2 groups were written, yet only what a resume needs stays
    buffer.close()
    assert set(counts) <= {"inflight", "ready"}, counts
    written = {json.loads(line)["group_id"] for _, line in jsonl_lines(out.read_text())}
    archived = [g.group_id for g in TrajectoryArchive(run_dir).load_groups()]
    assert len(written) == 6 and sorted(archived) == sorted(written)
    assert sorted(p.name for p in (run_dir / "trajectories").iterdir()) == [
        f"step_00000{i}.jsonl.gz" for i in (1, 2, 3)
    ]
