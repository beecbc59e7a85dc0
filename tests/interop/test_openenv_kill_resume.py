"""A real ``agentrl rollout`` job on OpenEnv-v0 SIGKILLed mid-step, then resumed with ``--resume RUN_DIR``.

The OpenEnv server (its own venv and process) outlives the killed job. With ``replayable: true`` every
stored episode continues with a byte-identical prefix (its env rebuilt by verified replay); with
``replayable: false`` the partial episodes that had stepped are restarted (new ids, counted in the
job's ``restarted`` log) and their tasks still appear exactly once. Nothing is lost or doubled.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from agentrl.rollout.buffer import RolloutBuffer
from agentrl.trajectory import Episode
from agentrl.util.jsonl import jsonl_lines

pytest.importorskip("websockets", reason="needs websockets: pip install 'agentrl[openenv]'")

from job_harness import sigkill, start_rollout, stored_partials, wait_while_alive
from openenv_server import openenv_server

TASKS = [f"{k}-{high}" for k in range(1, 4) for high in (9, 99)]


def _config(tmp_path: Path, model_dir: Path, url: str, replayable: bool) -> Path:
    kwargs = {
        "url": url,
        "action_field": "message",
        "observation_field": "text",
        "task_ids": TASKS,
        "max_turns": 3,
        "replayable": replayable,
    }
    cfg = {
        "model": {"path": str(model_dir)},
        "engine": {"kind": "embedded", "max_seq_len": 1024},
        "env": {"id": "agentrl/OpenEnv-v0", "kwargs": kwargs},
        "rollout": {
            "group_size": 2,
            "prompts_per_step": 2,
            "over_sample": 2.0,
            "max_new_tokens": 256,
            "max_episode_tokens": 1000,
        },
        "logging": {"run_root": str(tmp_path / "runs"), "run_name": "killed", "wandb_mode": "disabled"},
    }
    path = tmp_path / "config.json"  # JSON is YAML
    path.write_text(json.dumps(cfg))
    return path


def _kill_mid_step(proc: subprocess.Popen[bytes], db: Path, markers: Path, log: Path) -> None:
    """SIGKILL once a partial that already stepped the env is stored and the server stepped twice more."""
    stepped = lambda: any(any(t.reward is not None for t in e.turns) for e in stored_partials(db))  # noqa: E731
    wait_while_alive(stepped, proc, log, "storing a stepped partial episode")
    seen = len(list(markers.iterdir()))
    wait_while_alive(lambda: len(list(markers.iterdir())) >= seen + 2, proc, log, "the kill")
    sigkill(proc)


@pytest.mark.slow
@pytest.mark.parametrize("replayable", [True, False], ids=["replay", "restart"])
def test_sigkill_then_resume_on_openenv(tiny_model_dir: Path, tmp_path: Path, replayable: bool) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    with openenv_server("guess_app", markers=markers) as url:
        config, out, log = _config(tmp_path, tiny_model_dir, url, replayable), tmp_path / "out.jsonl", tmp_path / "log"
        run_dir = tmp_path / "runs" / "killed"
        _kill_mid_step(start_rollout(config, out, log), run_dir / "rollout_buffer.sqlite", markers, log)
        buffer = RolloutBuffer(run_dir / "rollout_buffer.sqlite")
        stored = [e for g in buffer.load_groups() for e in g.episodes]
        buffer.close()
        resumed = start_rollout(config, out, log, "--resume", str(run_dir))
        assert resumed.wait(timeout=600) == 0, log.read_text()[-3000:]

    episodes = [Episode.model_validate_json(line) for _, line in jsonl_lines(out.read_text())]
    groups: dict[str, list[Episode]] = {}
    for episode in episodes:
        groups.setdefault(episode.group_id, []).append(episode)
    assert sorted(members[0].task_id for members in groups.values()) == sorted(TASKS)  # each task exactly once
    assert all(len(members) == 2 for members in groups.values())
    assert all(e.status in ("complete", "truncated") for e in episodes)
    final = {e.episode_id: e for e in episodes}
    stepped = [e for e in stored if e.status == "partial" and any(t.reward is not None for t in e.turns)]
    assert stepped
    restarted = sum(int(n) for n in re.findall(r"(\d+) restarted", log.read_text()))
    for before in stored:
        if before.episode_id not in final:  # restarted: only allowed for non-replayable stepped partials
            assert not replayable and before in stepped
            continue
        after = final[before.episode_id]
        n = len(before.segment.completion_ids)
        assert after.segment.prompt_ids == before.segment.prompt_ids
        assert after.segment.completion_ids[:n] == before.segment.completion_ids
        assert after.segment.logprobs[:n] == before.segment.logprobs
    if replayable:
        assert all(e.episode_id in final and final[e.episode_id].resumed >= 1 for e in stepped)
    else:
        assert all(e.episode_id not in final for e in stepped) and restarted >= len(stepped)
