"""``agentrl train`` through the gateway, and a SIGKILLed ``agentrl rollout`` job resumed with ``--resume``.

The kill test runs a command agent (one subprocess per episode) as a user would. After the SIGKILL every
agent process is gone (they die with the job), and the resumed job loses and doubles nothing: with
``replayable: true`` each stored episode continues with a byte-identical prefix (its agent replayed, verified
request by request); with ``replayable: false`` the partial episodes whose agent had answered a turn are
restarted (new ids, counted), and every task still appears exactly once.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from job_harness import sigkill, start_rollout, stored_partials, wait_while_alive

from agentrl.rollout.buffer import RolloutBuffer
from agentrl.trajectory import Episode
from agentrl.util.jsonl import jsonl_lines

pytest.importorskip("openai", reason="needs the openai client: pip install 'agentrl[gateway]'")

HERE = Path(__file__).resolve().parent
# Tool time grows with the task: whichever groups a step over-samples, the first two finish seconds before the
# rest, which are then cut with answered turns (with 0.3 s for every task a fast machine finished all of a step's
# groups together and stored no partial: CI 2026-12-05). Twice the six tool times, so a job whose first boundaries
# cut no agent after its first answer (the shuffled order can put the slowest tasks in flight together) has more
# boundaries left before it ends (one run of six tasks stored partials only before any answer: 2026-12-07).
KILL_TASKS = [
    {"task_id": f"t{i}", "n": i, "calls": 3, "max_tokens": 48, "think_s": round(0.2 + 0.3 * (i % 6), 1)}
    for i in range(12)
]


def _config(tmp_path: Path, model_dir: Path, env_kwargs: dict, rollout: dict, name: str) -> Path:
    cfg = {
        "model": {"path": str(model_dir), "device": "cpu"},
        "engine": {"kind": "embedded", "max_batch_size": 16, "max_seq_len": 1024},
        "env": {"id": "agentrl/AgentGateway-v0", "kwargs": env_kwargs},
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 48, "max_episode_tokens": 900, **rollout},
        "algorithm": {"loss": "gspo_token"},
        "trainer": {"steps": 2, "lr": 1e-3, "mini_batches": 1, "checkpoint_every_steps": 2},
        "logging": {"run_root": str(tmp_path / "runs"), "run_name": name, "wandb_mode": "disabled", "progress": False},
    }
    path = tmp_path / f"{name}.json"  # JSON is YAML
    path.write_text(json.dumps(cfg))
    return path


def test_train_two_steps_through_the_gateway(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agentrl.job.loader import load_config
    from agentrl.trainer.loop import train

    tasks = [{"task_id": f"p{i}", "question": f"Say something about {i}."} for i in range(6)]
    env = {"agent": "gateway_agents:parity_agent", "tasks": tasks}
    config = _config(tmp_path, tiny_model_dir, env, {"partial_rollout": False, "group_size": 4}, "train")
    config.write_text(
        config.read_text().replace('"checkpoint_every_steps": 2', '"checkpoint_every_steps": 2, "deterministic": true')
    )
    run_dir = train(load_config(config), config_name="train")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2] and all(r["train/trained_tokens"] > 0 for r in records)
    assert (run_dir / "checkpoints" / "step_000002" / "model" / "model.safetensors").exists()
    archived = [
        Episode.model_validate(e)
        for path in sorted((run_dir / "trajectories").glob("*.jsonl.gz"))
        for line in gzip.open(path, "rt")
        for e in json.loads(line)["episodes"]
    ]
    assert len(archived) == 16 and {e.env_id for e in archived} == {"agentrl/AgentGateway-v0"}
    assert all(e.status == "complete" and len(e.turns) == 2 and e.segment.num_sampled > 0 for e in archived)
    assert len({e.final_reward for e in archived}) > 1


def _kill_mid_step(proc: subprocess.Popen[bytes], db: Path, log: Path) -> None:
    """SIGKILL as soon as a boundary stored a partial episode that already answered a turn: the job is then
    inside the next step (ready groups are handed at once, in-flight agents and generations move on)."""
    answered = lambda: any(any(t.reward is not None for t in e.turns) for e in stored_partials(db))  # noqa: E731
    wait_while_alive(answered, proc, log, "storing a partial episode with an answered turn", timeout_s=300)
    sigkill(proc)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # a zombie is dead, only not reaped yet


@pytest.mark.slow
@pytest.mark.parametrize("replayable", [True, False], ids=["replay", "restart"])
def test_sigkill_then_resume_through_the_gateway(tiny_model_dir: Path, tmp_path: Path, replayable: bool) -> None:
    markers, pids = tmp_path / "markers", tmp_path / "pids"
    markers.mkdir()
    pids.mkdir()
    agent = {
        "kind": "command",
        "command": [sys.executable, str(HERE / "chatty_agent_cli.py")],
        "env": {"AGENTRL_TEST_MARKERS": str(markers), "AGENTRL_TEST_PIDS": str(pids)},
    }
    env = {"agent": agent, "tasks": KILL_TASKS, "replayable": replayable, "max_turns": 3}
    config = _config(tmp_path, tiny_model_dir, env, {"over_sample": 2.0}, "killed")
    out, log, run_dir = tmp_path / "out.jsonl", tmp_path / "log", tmp_path / "runs" / "killed"
    _kill_mid_step(start_rollout(config, out, log), run_dir / "rollout_buffer.sqlite", log)
    killed_agents = [int(p.name) for p in pids.iterdir()]
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in killed_agents) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in killed_agents if _alive(pid)], "agent processes outlived the killed job"
    buffer = RolloutBuffer(run_dir / "rollout_buffer.sqlite")
    stored = [e for g in buffer.load_groups() for e in g.episodes]
    buffer.close()
    resumed = start_rollout(config, out, log, "--resume", str(run_dir))
    assert resumed.wait(timeout=600) == 0, log.read_text()[-3000:]

    episodes = [Episode.model_validate_json(line) for _, line in jsonl_lines(out.read_text())]
    groups: dict[str, list[Episode]] = {}
    for episode in episodes:
        groups.setdefault(episode.group_id, []).append(episode)
    assert sorted(members[0].task_id for members in groups.values()) == sorted(t["task_id"] for t in KILL_TASKS)
    assert all(len(members) == 2 for members in groups.values())
    assert all(e.status == "complete" and len(e.turns) == 3 for e in episodes)
    final = {e.episode_id: e for e in episodes}
    stepped = [e for e in stored if e.status == "partial" and any(t.reward is not None for t in e.turns)]
    assert stepped
    restarted = sum(int(n) for n in re.findall(r"(\d+) restarted", log.read_text()))
    for before in stored:
        if before.episode_id not in final:  # restarted: only allowed for a non-replayable agent's answered turns
            assert not replayable and before in stepped
            continue
        after = final[before.episode_id]
        n = len(before.segment.completion_ids)
        assert after.segment.prompt_ids == before.segment.prompt_ids
        assert after.segment.completion_ids[:n] == before.segment.completion_ids
        assert after.segment.logprobs[:n] == before.segment.logprobs
        assert after.segment.versions[:n] == before.segment.versions
    if replayable:
        assert all(e.episode_id in final and final[e.episode_id].resumed >= 1 for e in stepped)
    else:
        assert all(e.episode_id not in final for e in stepped) and restarted >= len(stepped)
