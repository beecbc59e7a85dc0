"""``agentrl train`` with ``engine.kind: sglang`` against SGLang 0.5.23's real CPU server: the main job's shape
(configs/code_agent.yaml: the multi-turn CodeAgent env, GSPO-token with per-turn advantages, partial rollouts,
engine logprobs as pi_old) on the tiny llama model, SIGKILLed mid-run and resumed with nothing lost or doubled.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from live_server import LiveServer, get_json, live_servers, make_llama_model, require_live_sglang

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
STEPS = 4
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _live_sglang() -> None:
    require_live_sglang()  # before the model is built: skip (or fail under CI) at once


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_llama_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def server(llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with live_servers(llama_dir, tmp_path_factory.mktemp("sglang-logs")) as servers:
        yield servers[0]


def code_agent_like(tmp_path: Path, model_dir: Path, url: str, **engine: Any) -> Path:
    """configs/code_agent.yaml on the tiny model and the real server, scaled to seconds per step."""
    cfg = yaml.safe_load((ROOT / "configs" / "code_agent.yaml").read_text())
    cfg["model"]["path"] = str(model_dir)
    cfg["engine"] = {"kind": "sglang", "urls": [url], "weights_dir": str(tmp_path / "weights"), **engine}
    cfg["env"]["kwargs"]["sandbox"] = {"kind": "process"}
    cfg["rollout"].update(group_size=2, prompts_per_step=2, max_new_tokens=48, max_episode_tokens=600)
    cfg["trainer"].update(
        steps=STEPS, lr=1e-3, micro_batch_tokens=2048, gradient_checkpointing=False, save_every=1, keep_checkpoints=2
    )
    cfg.pop("eval", None)
    cfg["logging"].update(run_root=str(tmp_path / "runs"), run_name="run", wandb_mode="disabled", progress=False)
    path = tmp_path / "code_agent_like.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def start_train(config: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "agentrl.cli.main", "train", str(config), *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def step_records(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["step"] for r in records if "episode/reward_mean" in r]


def trained_groups(run_dir: Path) -> Counter[tuple[int, str]]:
    seen: Counter[tuple[int, str]] = Counter()
    for path in sorted((run_dir / "trajectories").glob("step_*.jsonl.gz")):
        with gzip.open(path, "rt") as handle:
            for line in handle:
                record = json.loads(line)
                if record["state"] == "trained":
                    seen[(record["step"], record["group_id"])] += 1
    return seen


def test_train_on_the_real_server_killed_and_resumed(server: LiveServer, llama_dir: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(TESTS))
    from job_harness import sigkill, wait_while_alive

    config, log = code_agent_like(tmp_path, llama_dir, server.url), tmp_path / "job.log"
    run_dir = tmp_path / "runs" / "run"
    killed = start_train(config, log)
    wait_while_alive(lambda: (run_dir / "checkpoints" / "latest").exists(), killed, log, "a checkpoint", 600)
    sigkill(killed)
    done = step_records(run_dir)
    assert done and done[-1] < STEPS, "killed too late to test a resume"
    resumed = start_train(config, log, "--resume", str(run_dir))
    assert resumed.wait(timeout=900) == 0, log.read_text()[-4000:]

    assert step_records(run_dir) == list(range(1, STEPS + 1)), log.read_text()[-3000:]
    trained = trained_groups(run_dir)
    assert set(trained.values()) == {1}, trained  # no group archived twice
    assert Counter(step for step, _ in trained) == {step: 2 for step in range(1, STEPS + 1)}
    assert len({gid for _, gid in trained}) == 2 * STEPS  # no group trained in two steps
    assert get_json(server.url + "/model_info")[1]["weight_version"] == str(STEPS)  # the last step's sync
