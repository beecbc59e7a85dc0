"""``agentrl train`` with ``engine.kind: sglang`` against SGLang 0.5.23's real CPU server: the main job's shape
(configs/code_agent.yaml: the multi-turn CodeAgent env, GSPO-token with per-turn advantages, partial rollouts,
engine logprobs as pi_old) on the tiny llama model, SIGKILLed mid-run and resumed with nothing lost or doubled.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
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


def test_train_on_the_real_server_killed_and_resumed(server: LiveServer, llama_dir: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(TESTS))
    from job_harness import logged_steps, sigkill, wait_while_alive
    from live_train import assert_trained_once_each, code_agent_like, start_train

    engine = {"kind": "sglang", "urls": [server.url]}
    config, log = code_agent_like(tmp_path, llama_dir, engine, STEPS), tmp_path / "job.log"
    run_dir = tmp_path / "runs" / "run"
    killed = start_train(config, log)
    wait_while_alive(lambda: (run_dir / "checkpoints" / "latest").exists(), killed, log, "a checkpoint", 600)
    sigkill(killed)
    done = logged_steps(run_dir)
    assert done and done[-1] < STEPS, "killed too late to test a resume"
    resumed = start_train(config, log, "--resume", str(run_dir))
    assert resumed.wait(timeout=900) == 0, log.read_text()[-4000:]

    assert_trained_once_each(run_dir, STEPS, 2, log)
    assert get_json(server.url + "/model_info")[1]["weight_version"] == str(STEPS)  # the last step's sync
