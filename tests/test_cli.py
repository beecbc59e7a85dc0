"""The ``agentrl`` console script: --help, envs, make-model (run as real subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("agentrl")


def _agentrl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(SCRIPT), *args] if SCRIPT.exists() else [sys.executable, "-m", "agentrl.cli.main", *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "200"}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def test_help_lists_the_subcommands() -> None:
    result = _agentrl("--help")
    assert result.returncode == 0, result.stderr
    assert "envs" in result.stdout and "make-model" in result.stdout


def test_envs_lists_the_registered_environments() -> None:
    result = _agentrl("envs", "--width", "200")
    assert result.returncode == 0, result.stderr
    assert "agentrl/GuessNumber-v0" in result.stdout and "agentrl/MagicWord-v0" in result.stdout


@pytest.mark.slow
def test_make_model_tiny_writes_a_model_transformers_loads_offline(tmp_path: Path) -> None:
    out = tmp_path / "m"
    result = _agentrl("make-model", "tiny", "--out", str(out))
    assert result.returncode == 0, result.stderr
    check = (
        "from transformers import AutoModelForCausalLM, AutoTokenizer; import sys; "
        "m = AutoModelForCausalLM.from_pretrained(sys.argv[1]); t = AutoTokenizer.from_pretrained(sys.argv[1]); "
        "print(t.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False, add_generation_prompt=True), "
        "end='')"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    loaded = subprocess.run(
        [sys.executable, "-c", check, str(out)], capture_output=True, text=True, timeout=120, env=env
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    again = _agentrl("make-model", "tiny", "--out", str(out))
    assert (
        again.returncode == 2 and f"output directory '{out}' is not empty" in again.stderr and "--force" in again.stderr
    )


def test_errors_print_one_clean_line_not_a_traceback(tmp_path: Path) -> None:
    result = _agentrl("envs", "--import", "no_such_env_module")
    assert result.returncode == 2
    assert "agentrl: error: cannot import env module 'no_such_env_module'" in result.stderr
    assert "Traceback" not in result.stderr


def test_envs_at_80_columns_keeps_every_id_whole_and_every_line_within_80() -> None:
    result = _agentrl("envs", "--width", "80")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "agentrl/GuessNumber-v0" in lines and "agentrl/CodeExec-v0" in lines  # an id alone on its line
    assert max(len(line) for line in lines) <= 80
    assert "  max turns 3; tools: run_python, submit; entry point envs.code_exec:CodeExecEnv" in lines
