"""A stop signal during the last step ends a complete run (exit 0, no "Resume with"), and ``--resume`` of a
finished run says so. Real jobs with the tiny model; the env holds step 2's episodes until the test lets go."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

HOLDING_ENV = '''
"""Episodes after the first step's hold while a file exists (so a signal surely lands in the last step)."""
import itertools
import os
import time

from agentrl.env import MultiTurnEnv, user

RESETS = itertools.count(1)


class Holding(MultiTurnEnv):
    """One turn; reward 1 for a long reply."""

    def __init__(self, hold: str = "", first_step_episodes: int = 4) -> None:
        self.hold, self.first = hold, first_step_episodes

    def task_ids(self):
        return [f"t{i}" for i in range(4)]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.number = next(RESETS)
        return [user("Say something.")], {"task_id": self.choose_task_id(options, self.task_ids(), "Holding")}

    def step(self, action):
        if self.number > self.first and self.hold:
            open(self.hold + ".reached", "a").close()
            while os.path.exists(self.hold):
                time.sleep(0.1)
        return [], float(len(action) > 8), True, False, {}
'''


def _config(tmp_path: Path, model_dir: Path, hold: Path) -> Path:
    config = {
        "model": {"path": str(model_dir), "device": "cpu", "dtype": "float32"},
        "engine": {"kind": "embedded", "max_batch_size": 8, "max_seq_len": 256},
        "env": {"id": "holding_env:Holding", "kwargs": {"hold": str(hold)}},
        "rollout": {
            "group_size": 2,
            "prompts_per_step": 2,
            "partial_rollout": False,
            "max_new_tokens": 8,
            "max_episode_tokens": 200,
            "over_sample": 1.0,
        },
        "trainer": {
            "steps": 2,
            "mini_batches": 1,
            "checkpoint_every_steps": 1,
            "checkpoint_every_s": None,
            "lr": 1e-3,
            "gradient_checkpointing": False,
        },
        "logging": {"run_root": str(tmp_path / "runs"), "run_name": "run", "progress": False, "wandb_mode": "disabled"},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    (tmp_path / "holding_env.py").write_text(HOLDING_ENV, encoding="utf-8")
    return path


def _agentrl(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    return subprocess.Popen(
        [sys.executable, "-m", "agentrl", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_stop_in_the_last_step_finishes_the_run_and_a_resume_says_it_is_done(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    hold.touch()
    config = _config(tmp_path, tiny_model_dir, hold)
    proc = _agentrl(tmp_path, "train", config.name)
    deadline = time.monotonic() + 300
    while not Path(str(hold) + ".reached").exists():
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # step 2, the last, is running: its episodes wait on the hold file
    time.sleep(1.0)
    hold.unlink()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    assert "the stop signal arrived during the last step: all 2 steps are trained and checkpointed" in out
    assert "Resume with" not in out
    run_dir = tmp_path / "runs" / "run"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "episode/reward_mean" in r] == [1, 2]
    resumed = _agentrl(tmp_path, "train", "--resume", str(run_dir))
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out[-3000:]
    assert f"{run_dir} already finished: its checkpoint is step 2 of 2; nothing to do" in out
