"""A real rollout job SIGKILLed in the middle of a step, then resumed with ``--resume RUN_DIR``.

Asserts: every episode stored before the kill continues with a byte-identical prefix (tokens,
logprobs, versions), the code-execution-style env's state after resume equals its state before
the kill, and every dataset prompt is completed exactly once in the output file.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from job_harness import sigkill, start_rollout, stored_partials, wait_while_alive

from agentrl.rollout.buffer import RolloutBuffer
from agentrl.trajectory import Episode
from agentrl.util.jsonl import jsonl_lines

HERE = Path(__file__).resolve().parent
TASKS = [f"task-{i}" for i in range(8)]


def _config(tmp_path: Path, model_dir: Path) -> Path:
    markers = tmp_path / "markers"
    markers.mkdir()
    # Long replies (200 tokens vs 3: ~200 decode steps against a 20 ms env step) keep the long episodes
    # generating when a step's groups complete, so the buffer soon holds an episode cut mid-turn
    # however fast the engine is (at 64 tokens a fast engine sometimes finished a turn just in time).
    kwargs = {
        "num_tasks": 8,
        "long_tasks": ["task-1", "task-4", "task-6"],
        "long_reply_tokens": 200,
        "reply_tokens": 3,
        "step_sleep_s": 0.02,
        "marker_dir": str(markers),
    }
    cfg = {
        "model": {"path": str(model_dir)},
        "engine": {"kind": "embedded", "max_seq_len": 1024},
        "env": {"id": "rollout_test_envs:Scratchpad", "kwargs": kwargs, "import_modules": []},
        "rollout": {
            "group_size": 2,
            "prompts_per_step": 2,
            "over_sample": 2.0,
            "max_new_tokens": 256,
            "max_episode_tokens": 900,
        },
        "trainer": {"mini_batches": 1},
        "logging": {"run_root": str(tmp_path / "runs"), "run_name": "killed", "wandb_mode": "disabled"},
    }
    path = tmp_path / "config.json"  # JSON is YAML
    path.write_text(json.dumps(cfg))
    return path


def _mid_turn_partials(db: Path) -> int:
    """Stored partial episodes cut in the middle of an assistant turn (tokens sampled, env not stepped)."""
    return sum(1 for e in stored_partials(db) if e.turns and e.turns[-1].reward is None and e.turns[-1].num_tokens > 0)


def _kill_mid_step(proc: subprocess.Popen[bytes], db: Path, markers: Path, log: Path) -> None:
    """SIGKILL once a mid-turn partial episode is stored and the next step has stepped the env twice more."""
    wait_while_alive(lambda: _mid_turn_partials(db) > 0, proc, log, "storing a partial episode", timeout_s=180)
    seen = len(list(markers.iterdir()))
    wait_while_alive(lambda: len(list(markers.iterdir())) >= seen + 2, proc, log, "the kill")
    sigkill(proc)


def _episodes(out: Path) -> list[Episode]:
    return [Episode.model_validate_json(line) for _, line in jsonl_lines(out.read_text())]


@pytest.mark.slow
def test_sigkill_mid_step_then_resume_loses_nothing(tiny_model_dir: Path, tmp_path: Path) -> None:
    config, out, log = _config(tmp_path, tiny_model_dir), tmp_path / "episodes.jsonl", tmp_path / "job.log"
    run_dir = tmp_path / "runs" / "killed"
    db = run_dir / "rollout_buffer.sqlite"
    _kill_mid_step(start_rollout(config, out, log, path=[HERE]), db, tmp_path / "markers", log)

    buffer = RolloutBuffer(db)  # what the killed job had stored (its last committed boundary)
    stored = [e for g in buffer.load_groups() for e in g.episodes]
    buffer.close()
    partial = [e for e in stored if e.status == "partial"]
    assert partial and any(e.segment.num_sampled for e in partial)

    resumed = start_rollout(config, out, log, "--resume", str(run_dir), path=[HERE])
    assert resumed.wait(timeout=300) == 0, log.read_text()[-3000:]
    assert "resumed" in log.read_text()

    episodes = _episodes(out)
    groups: dict[str, list[Episode]] = {}
    for ep in episodes:
        groups.setdefault(ep.group_id, []).append(ep)
    assert all(len(members) == 2 for members in groups.values())
    assert sorted(members[0].task_id for members in groups.values()) == TASKS  # every prompt exactly once
    assert all(ep.status == "complete" for ep in episodes)

    final = {ep.episode_id: ep for ep in episodes}
    for before in stored:
        after = final[before.episode_id]
        b, a = before.segment, after.segment
        n = len(b.completion_ids)
        assert a.prompt_ids == b.prompt_ids and a.completion_ids[:n] == b.completion_ids
        assert a.logprobs[:n] == b.logprobs and a.versions[:n] == b.versions and a.loss_mask[:n] == b.loss_mask
    for before in partial:
        stepped = [t for t in before.turns if t.reward is not None]
        expected = stepped[-1].info["vars_after"] if stepped else {"seed": str(before.seed)}
        assert final[before.episode_id].turns[len(stepped)].info["vars_before"] == expected
        assert final[before.episode_id].resumed >= 1
