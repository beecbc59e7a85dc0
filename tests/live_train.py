"""What the live-server training tests share (SGLang's and vLLM's tiers): the main job's shape scaled to seconds
per step against a real server, ``agentrl train`` in a subprocess, and what its run directory says was trained."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from job_harness import logged_steps

ROOT = Path(__file__).resolve().parents[1]


def code_agent_like(tmp_path: Path, model_dir: Path, engine: dict[str, Any], steps: int) -> Path:
    """configs/code_agent.yaml (the multi-turn CodeAgent env, GSPO-token with per-turn advantages, partial
    rollouts, engine logprobs as pi_old) on a tiny model and ``engine``, a checkpoint every step."""
    cfg = yaml.safe_load((ROOT / "configs" / "code_agent.yaml").read_text())
    cfg["model"]["path"] = str(model_dir)
    cfg["engine"] = {"weights_dir": str(tmp_path / "weights"), **engine}
    cfg["env"]["kwargs"]["sandbox"] = {"kind": "process"}
    cfg["rollout"].update(group_size=2, prompts_per_step=2, max_new_tokens=48, max_episode_tokens=600)
    cfg["trainer"].update(
        steps=steps,
        lr=1e-3,
        micro_batch_tokens=2048,
        gradient_checkpointing=False,
        checkpoint_every_steps=1,
        keep_checkpoints=2,
    )
    cfg.pop("eval", None)
    cfg["logging"].update(run_root=str(tmp_path / "runs"), run_name="run", wandb_mode="disabled", progress=False)
    path = tmp_path / "code_agent_like.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def start_train(config: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    """``agentrl train CONFIG [extra]`` in a subprocess, its output appended to ``log``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "agentrl.cli.main", "train", str(config), *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def trained_groups(run_dir: Path) -> Counter[tuple[int, str]]:
    """(step, group id) -> how many trained episodes of that group the trajectory archive holds."""
    seen: Counter[tuple[int, str]] = Counter()
    for path in sorted((run_dir / "trajectories").glob("step_*.jsonl.gz")):
        with gzip.open(path, "rt") as handle:
            for line in handle:
                record = json.loads(line)
                if record["state"] == "trained":
                    seen[(record["step"], record["group_id"])] += 1
    return seen


def assert_trained_once_each(run_dir: Path, steps: int, groups_per_step: int, log: Path) -> None:
    """Every step recorded once, in order; every group trained in exactly one step, none archived twice."""
    assert logged_steps(run_dir) == list(range(1, steps + 1)), log.read_text()[-3000:]
    trained = trained_groups(run_dir)
    assert set(trained.values()) == {1}, trained  # no group archived twice
    assert Counter(step for step, _ in trained) == {step: groups_per_step for step in range(1, steps + 1)}
    assert len({gid for _, gid in trained}) == groups_per_step * steps  # no group trained in two steps


def magic_word_run(
    tmp_path: Path, model_dir: Path, engine: dict[str, Any], name: str, steps: int, lr: float, **algorithm: Any
) -> Path:
    """A dense-reward multi-turn run (MagicWord, 2 turns: a random model's groups carry signal, so every step
    moves the weights), auditing the engine's logprobs against the trainer's at every step (``algorithm``: more
    algorithm settings); returns its run dir."""
    (tmp_path / name).mkdir()
    config = code_agent_like(tmp_path / name, model_dir, engine, steps)
    cfg = yaml.safe_load(config.read_text())
    cfg["env"] = {"id": "agentrl/MagicWord-v0", "kwargs": {"turns": 2}}
    cfg["rollout"].update(group_size=4, max_new_tokens=16, max_episode_tokens=200, stop=[], max_staleness=0)
    cfg["algorithm"].update({"audit_every": 1, "proximal": "behaviour", **algorithm})  # the audit reads engine logprobs
    cfg["trainer"]["lr"] = lr
    cfg["logging"]["run_name"] = name
    config.write_text(yaml.safe_dump(cfg))
    log = tmp_path / f"{name}.log"
    assert start_train(config, log).wait(timeout=900) == 0, log.read_text()[-4000:]
    return tmp_path / name / "runs" / name


def step_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's training-step records, in order."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in records if "episode/reward_mean" in r]
