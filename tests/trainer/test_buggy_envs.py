"""A buggy env, as a new user writes one, fails `agentrl train` within the first step and fails `--dry-run`, each
time naming the env method, what it returned and what it must return (it once hung silently, dropping groups)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrl.errors import EnvContractError
from agentrl.job.loader import load_config

ROOT = Path(__file__).resolve().parents[2]
ENVS_DIR = ROOT / "tests" / "rollout"  # buggy_envs.py
TRAIN_LIMIT_S = 300  # a hang (the old behaviour) ends here as a failure; the fix fails in well under a minute

CASES = [
    (
        "StepRaises",
        "StepRaises.step('I am not sure yet.') raised KeyError: 'answer' (File ",
        "env: StepRaises.step raised KeyError: 'answer'",
    ),
    (
        "StrObservation",
        "StrObservation.reset broke the env contract: the observation is 'What is 2 + 2?' (a str), not a list of "
        "chat messages; reset must return a tuple (messages, info)",
        "StrObservation.reset broke the env contract: the observation is 'What is 2 + 2?' (a str)",
    ),
    (
        "WrongTuple",
        "WrongTuple.step broke the env contract: it returned ([], 1.0, True, {}) (a tuple) (old gym's 4-tuple",
        "WrongTuple.step broke the env contract: it returned ([], 1.0, True, {}) (a tuple)",
    ),
]


def _config(tmp_path: Path, model_dir: Path, env_class: str, **trainer: Any) -> Path:
    data = {
        "model": {"path": str(model_dir), "device": "cpu"},
        "engine": {"kind": "embedded", "max_batch_size": 8, "max_seq_len": 256},
        "env": {"id": f"buggy_envs:{env_class}", "import_modules": []},
        "rollout": {
            "group_size": 2,
            "prompts_per_step": 2,
            "partial_rollout": False,
            "max_new_tokens": 4,
            "max_episode_tokens": 128,
        },
        "trainer": {"steps": 2, "mini_batches": 1, "checkpoint_every_steps": 1, **trainer},
        "logging": {"run_root": str(tmp_path / "runs"), "wandb_mode": "disabled", "progress": False},
    }
    path = tmp_path / f"{env_class}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _agentrl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ENVS_DIR}{os.pathsep}{ROOT}"}
    return subprocess.run(
        [sys.executable, "-m", "agentrl", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TRAIN_LIMIT_S,
    )


@pytest.mark.slow
@pytest.mark.parametrize(("env_class", "_", "in_train"), CASES)
def test_train_fails_within_the_first_step_naming_the_env_method(
    env_class: str, _: str, in_train: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    started = time.monotonic()
    done = _agentrl("train", str(_config(tmp_path, tiny_model_dir, env_class)), cwd=tmp_path)
    assert done.returncode != 0, done.stdout[-2000:]
    assert in_train in done.stderr, done.stderr[-3000:]
    assert "groups were dropped this step so far" in done.stderr and "rollout.max_drop_rate" in done.stderr
    assert "corrupted" not in done.stderr
    run_dir = next((tmp_path / "runs").iterdir())
    assert not (run_dir / "checkpoints").exists()  # it stopped inside step 1
    assert time.monotonic() - started < TRAIN_LIMIT_S


@pytest.mark.parametrize(("env_class", "in_dry_run", "_"), CASES)
def test_the_dry_run_runs_one_real_turn_and_catches_it(
    env_class: str, in_dry_run: str, _: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from agentrl.trainer.preflight import check_env

    sys.path.insert(0, str(ENVS_DIR))
    try:
        with pytest.raises(EnvContractError) as caught:
            check_env(load_config(_config(tmp_path, tiny_model_dir, env_class)))
    finally:
        sys.path.remove(str(ENVS_DIR))
    assert in_dry_run in str(caught.value)


@pytest.mark.slow
def test_the_dry_run_command_fails_on_a_buggy_env_and_passes_its_healthy_twin(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    bad = _agentrl("train", str(_config(tmp_path, tiny_model_dir, "StrObservation")), "--dry-run", cwd=tmp_path)
    assert bad.returncode == 2 and "StrObservation.reset broke the env contract" in bad.stderr, bad.stderr[-2000:]
    good = _agentrl("train", str(_config(tmp_path, tiny_model_dir, "Healthy")), "--dry-run", cwd=tmp_path)
    assert good.returncode == 0, good.stderr[-2000:]
    assert "ok: env buggy_envs:Healthy: one turn of task '0': reset gave 1 message(s)" in good.stdout
    assert "reward 1, terminated True" in good.stdout


@pytest.mark.slow
def test_a_step_that_trains_nothing_says_so_and_a_resume_says_what_it_restored(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentrl.trainer.loop import train

    sys.path.insert(0, str(ENVS_DIR))
    try:
        config = _config(tmp_path, tiny_model_dir, "Healthy", steps=1)
        run_dir = train(load_config(config, ["logging.run_name=equal"]), config_name="run")
        first = capsys.readouterr().out
        train(load_config(config, ["logging.run_name=equal", "trainer.steps=2"]), config_name="run", resume=run_dir)
        second = capsys.readouterr().out
    finally:
        sys.path.remove(str(ENVS_DIR))
    # Healthy rewards every episode 1.0: each group's rewards are equal, so no row has an advantage.
    assert "[train] step 1: nothing was trained (0 optimizer steps)" in first
    assert "2 groups had equal rewards" in first
    assert f"[train] resumed {run_dir} from checkpoint step 1: 0 groups carried" in second
    assert "[train] step 2: nothing was trained" in second
