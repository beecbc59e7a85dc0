"""The task dataset cursor, the SQLite buffer (round trip, transactions, fingerprints, corruption),
staleness decisions and env restore by snapshot or replay."""

from __future__ import annotations

from pathlib import Path

import pytest
from rollout_test_envs import NoisyScratchpad, OpaqueScratchpad, Scratchpad, SnapshotScratchpad

from agentrl.errors import RolloutBufferError
from agentrl.rollout.buffer import RolloutBuffer, StoredGroup
from agentrl.rollout.dataset import TaskDataset, task_seed
from agentrl.rollout.replay import restore_episode_env
from agentrl.rollout.staleness import decide, staleness
from agentrl.trajectory import Episode, TokenSegment, TurnRecord


def _episode(eid: str, versions: list[int], status: str = "partial") -> Episode:
    n = len(versions)
    seg = TokenSegment(
        prompt_ids=[1, 2, 3],
        completion_ids=list(range(10, 10 + n)),
        logprobs=[-0.1 * (i + 1) / 3 for i in range(n)],
        loss_mask=[1] * n,
        turn_ids=[0] * n,
        versions=versions,
    )
    return Episode(episode_id=eid, task_id="t", group_id="g", seed=7, segments=[seg], status=status)  # type: ignore[arg-type]


def test_dataset_order_is_seeded_per_epoch_and_cursor_restores() -> None:
    ids = [f"t{i}" for i in range(5)]
    a = TaskDataset(ids, seed=3, epochs=2)
    issued = [a.next() for _ in range(10)]
    assert a.next() is None and a.exhausted()
    assert sorted(t for _, t in issued[:5]) == ids and sorted(t for _, t in issued[5:]) == ids
    b = TaskDataset(ids, seed=3, epochs=2)
    b.load_state(a.state() | {"cursor": 4})
    assert [b.next() for _ in range(6)] == issued[4:]
    with pytest.raises(RolloutBufferError, match="does not match"):
        TaskDataset(ids[:4], seed=3).load_state(a.state())


def test_dataset_without_task_ids_uses_seeds_and_task_seed_is_stable() -> None:
    ds = TaskDataset([])
    assert [ds.next() for _ in range(3)] == [(0, "0"), (1, "1"), (2, "2")] and not ds.exhausted()
    assert task_seed("task-1") == task_seed("task-1") != task_seed("task-2")
    assert TaskDataset.from_env(Scratchpad(num_tasks=4)).task_ids == [f"task-{i}" for i in range(4)]


def test_buffer_round_trips_episodes_exactly(tmp_path: Path) -> None:
    buf = RolloutBuffer(tmp_path / "b.sqlite")
    ep = _episode("e1", [0, 0, 1])
    ep.segments[0].logprobs = [-1e-30, -3.4028234663852886e38, -0.123456789012345678]
    buf.write_boundary(1, [StoredGroup("g", "t", 0, "inflight", None, [ep, _episode("e2", [1])])], {"cursor": 1})
    buf.close()
    again = RolloutBuffer(tmp_path / "b.sqlite")
    [group] = again.load_groups()
    assert group.episodes[0] == ep and group.episodes[0].model_dump_json() == ep.model_dump_json()
    assert [e.episode_id for e in group.episodes] == ["e1", "e2"]
    assert again.dataset_state() == {"cursor": 1} and again.last_step() == 1


def test_buffer_boundary_is_one_transaction_and_commit_marks_trained(tmp_path: Path) -> None:
    buf = RolloutBuffer(tmp_path / "b.sqlite")
    handed = StoredGroup("g1", "t1", 0, "handed", 1, [_episode("a", [0], "complete")])
    buf.write_boundary(1, [handed], {"cursor": 1})
    bad = StoredGroup(
        "g2", "t2", 1, "ready", None, [_episode("b", [0], "complete"), _episode("b", [0], "complete")]
    )  # duplicate id
    with pytest.raises(RolloutBufferError, match="appears twice"):
        buf.write_boundary(2, [StoredGroup("g3", "t3", 2, "ready", None, [_episode("c", [0])]), bad], {"cursor": 3})
    assert buf.dataset_state() == {"cursor": 1} and [g.group_id for g in buf.load_groups()] == [
        "g1"
    ]  # nothing of step 2 leaked
    assert buf.commit_step(1) == 1
    assert buf.load_groups() == [] and buf.counts() == {"trained": 1}


def test_buffer_refuses_other_fingerprints_and_corrupt_files(tmp_path: Path) -> None:
    buf = RolloutBuffer(tmp_path / "b.sqlite")
    buf.bind_fingerprints({"tokenizer": "aaa", "chat_template": "t1"})
    buf.bind_fingerprints({"tokenizer": "aaa", "chat_template": "t1"})
    with pytest.raises(RolloutBufferError, match="chat_template: buffer 't1' != now 't2'"):
        buf.bind_fingerprints({"tokenizer": "aaa", "chat_template": "t2"})
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite at all" * 200)
    with pytest.raises(RolloutBufferError, match="corrupted or not a SQLite database"):
        RolloutBuffer(junk)


def test_buffer_reports_an_episode_that_does_not_parse(tmp_path: Path) -> None:
    buf = RolloutBuffer(tmp_path / "b.sqlite")
    buf.write_boundary(1, [StoredGroup("g", "t", 0, "inflight", None, [_episode("e", [0])])], {"cursor": 1})
    buf._conn.execute("UPDATE episodes SET data = '{\"episode_id\": 3'")
    with pytest.raises(RolloutBufferError, match="does not parse"):
        buf.load_groups()


def test_staleness_policies() -> None:
    ep = _episode("e", [3, 4, 5])
    assert staleness(ep, 6) == 3 and staleness(_episode("x", []), 9) == 0
    assert decide(ep, 5, max_staleness=2, policy="drop") == "keep"
    assert decide(ep, 6, max_staleness=2, policy="drop") == "restart"
    assert decide(ep, 6, max_staleness=2, policy="mask") == "mask"


def _played(env: Scratchpad, actions: list[str]) -> Episode:
    """An episode record of ``env`` after ``actions`` (as the runner records it)."""
    opening, _ = env.reset(seed=11, options={"task_id": "task-2"})
    ep = Episode(
        episode_id="e",
        task_id="task-2",
        group_id="g",
        seed=11,
        reset_options={"task_id": "task-2"},
        messages=list(opening),
    )
    for k, action in enumerate(actions):
        messages, reward, *_ = env.step(action)
        ep.turns.append(TurnRecord(index=k, action=action, reward=float(reward), env_messages=messages))
        ep.messages += [{"role": "assistant", "content": action}, *messages]
        ep.env_snapshot = env.snapshot()
    ep.turns.append(TurnRecord(index=len(actions), action="", num_tokens=4))  # the partial turn: not stepped
    return ep


@pytest.mark.parametrize(
    ("cls", "method"),
    [
        (Scratchpad, "replay"),
        (SnapshotScratchpad, "snapshot"),
        (OpaqueScratchpad, "restart"),
        (NoisyScratchpad, "restart"),
    ],
)
def test_env_restore_by_snapshot_or_replay(cls: type[Scratchpad], method: str) -> None:
    original = cls()
    ep = _played(original, ["x = 1", "y = x + 1"])
    fresh = cls()
    outcome = restore_episode_env(fresh, ep)
    assert outcome.method == method, outcome.reason
    if method != "restart":
        assert fresh.vars == original.vars and fresh.steps_taken == 2
