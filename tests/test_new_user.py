"""What a new user meets when writing an environment from the docs (issue 12): the `agentrl` command finds
`module:Class` envs in the working directory, `python -m agentrl` exists, `agentrl envs` tells the truth about
defaults, and `agentrl inspect` shows the prompt (system and tools) an episode started from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentrl.chat import ChatAssembler
from agentrl.cli.main import main
from agentrl.messages import system, user
from agentrl.registry import list_envs
from agentrl.trajectory import Episode, TokenSegment

ROOT = Path(__file__).resolve().parents[1]
AGENTRL = Path(sys.executable).parent / "agentrl"  # the console script, as a user runs it
DOC = ROOT / "docs" / "writing-an-environment.md"


def _tutorial_env() -> str:
    import re

    return re.findall(r"^```python\n(.*?)^```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL | re.MULTILINE)[0]


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PATH": f"{AGENTRL.parent}{os.pathsep}{env.get('PATH', '')}"}


@pytest.mark.slow
def test_the_agentrl_command_finds_the_tutorial_env_in_the_working_directory(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "my_envs.py").write_text(_tutorial_env(), encoding="utf-8")
    config = {
        "model": {"path": str(tiny_model_dir)},
        "env": {"id": "my_envs:MathQuiz", "kwargs": {"num_tasks": 20}},
        "trainer": {"mini_batches": 1},
        "logging": {"run_root": str(tmp_path / "runs")},
    }
    (tmp_path / "quiz.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [str(AGENTRL), "train", "quiz.yaml", "--dry-run"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ok: env my_envs:MathQuiz: one turn of task 'q0'" in done.stdout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    missing = subprocess.run(
        [str(AGENTRL), "train", str(tmp_path / "quiz.yaml"), "--dry-run"],
        cwd=elsewhere,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert missing.returncode == 2
    assert "run it where my_envs.py is, or add that directory to PYTHONPATH" in missing.stderr


def test_python_dash_m_agentrl_is_the_agentrl_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentrl", "--version"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.startswith("agentrl "), done.stderr


def test_agentrl_envs_shows_each_env_as_its_default_kwargs_build_it() -> None:
    infos = {info.id: info for info in list_envs()}
    code = infos["agentrl/CodeExec-v0"]
    assert (code.max_turns, code.tools) == (3, ("run_python", "submit"))
    assert infos["agentrl/ToolUse-v0"].max_turns == 4  # set from its config in __init__, not the class default 8


def test_inspect_shows_the_system_and_tools_prompt_an_episode_started_from(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import AutoTokenizer

    from agentrl.tools import as_tool

    def lookup(country: str) -> str:
        """Look a country up.

        Args:
            country: Its name.
        """
        return country

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assembler = ChatAssembler(tokenizer, tools=[as_tool(lookup).schema])
    opening = [system("You are a geographer."), user("Capital of Peru?")]
    episode = Episode(
        episode_id="e1",
        task_id="t",
        group_id="g",
        messages=opening,
        segments=[TokenSegment(prompt_ids=assembler.prompt_ids(opening))],
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "episodes.jsonl").write_text(episode.model_dump_json() + "\n")
    (run_dir / "rollout_config.json").write_text(json.dumps({"model": {"path": str(tiny_model_dir)}}))
    assert main(["inspect", str(run_dir / "episodes.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "prompt (" in out and "as the model saw it" in out
    assert "You are a geographer." in out and '"name": "lookup"' in out and "Capital of Peru?" in out
    (run_dir / "rollout_config.json").unlink()  # no tokenizer at hand: the opening messages and a hint
    assert main(["inspect", str(run_dir / "episodes.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "pass --tokenizer MODEL_DIR" in out and "system: 'You are a geographer.'" in out
    assert main(["inspect", str(run_dir / "episodes.jsonl"), "--tokenizer", str(tiny_model_dir)]) == 0
    assert '"name": "lookup"' in capsys.readouterr().out
