"""What a new user meets when writing an environment from the docs (issue 12): the `agentrl` command finds
`module:Class` envs in the working directory, `python -m agentrl` exists, `agentrl envs` tells the truth about
defaults, and `agentrl inspect` shows the prompt (system and tools) an episode started from."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrl.chat import ChatAssembler
from agentrl.chat.messages import system, user
from agentrl.cli.main import main
from agentrl.env.registry import list_envs
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


# --- The newcomer's scenario (issue 31): a three-room text adventure with tools, written from the tutorial's
# pattern, taken through the failures a first env meets: a tool typed with its own class, a step that blocks, a
# step that raises, Ctrl-C and a kill, then a resume that names only the run directory.

ADVENTURE = '''
"""Three rooms; find the key with the `go` and `take` tools, then reply 'Done'."""

import os
import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentrl.env import MultiTurnEnv, user
from agentrl.tools.toolcall import has_tool_call
from agentrl.tools import execute_tool_calls

ROOMS = ("hall", "kitchen", "cellar")


class AdventureConfig(BaseModel):
    """Constructor kwargs of Adventure."""

    model_config = ConfigDict(extra="forbid")
    fault: str = Field("none", description="none, block (step never returns) or raise (step raises).")
    marker: str = Field("", description="File created when a step starts blocking (tests wait for it).")


class Adventure(MultiTurnEnv):
    """Find the key in one of three rooms."""

    max_turns = 3
    config_model = AdventureConfig

    def __init__(self, **kwargs: Any) -> None:
        self.config = AdventureConfig(**kwargs)
        self.room, self.key_room, self.has_key = "hall", "cellar", False
        self.tools = (self.go, self.take)

    def go(self, room: str) -> str:
        """Walk to a room.

        Args:
            room: hall, kitchen or cellar.
        """
        if room not in ROOMS:
            return f"No room {room!r}; rooms: {', '.join(ROOMS)}."
        self.room = room
        return f"You are in the {room}." + (" A key lies here." if room == self.key_room else "")

    def take(self) -> str:
        """Pick up what lies in this room."""
        self.has_key = self.has_key or self.room == self.key_room
        return "You hold the key." if self.has_key else "Nothing here."

    def task_ids(self) -> list[str]:
        return [f"t{i}" for i in range(8)]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        task_id = self.choose_task_id(options, self.task_ids(), "Adventure")
        self.room, self.key_room, self.has_key = "hall", ROOMS[int(task_id[1:]) % 3], False
        return [user("Find the key, then reply 'Done'.")], {"task_id": task_id}

    def step(self, action: str):
        if self.config.fault == "block":
            if self.config.marker:
                open(self.config.marker, "a").close()
            threading.Event().wait()  # waits for something that never comes
        if self.config.fault == "raise":
            return self._grade(action)
        if has_tool_call(action):
            formed = {"well_formed": 0.1}
            return execute_tool_calls(action, self.tools), 0.1, False, False, {"reward_components": formed}
        return [], float(self.has_key), True, False, {"success": self.has_key}

    def _grade(self, action: str):
        doors = {"hall": "kitchen"}
        return [user(doors[self.room + "-typo"])], 0.0, False, False, {}


class Room:
    """A room object of the env's own."""


def enter(room: Room) -> str:
    """Enter a room.

    Args:
        room: The room.
        hurry: Run (documented, but not a parameter).
    """
    return "in"


class RoomObjects(Adventure):
    """The same adventure with a tool typed with the env's own class."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tools = (self.go, enter)
'''


def _adventure_config(tmp_path: Path, model_dir: Path, env_id: str = "adventure:Adventure", **env: Any) -> Path:
    kwargs = env.pop("kwargs", {})
    config = {
        "model": {"path": str(model_dir), "device": "cpu"},
        "engine": {"kind": "embedded", "max_batch_size": 8, "max_seq_len": 1024},
        "env": {"id": env_id, "kwargs": kwargs, **env},
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 12, "max_episode_tokens": 900},
        "trainer": {"steps": 4, "mini_batches": 1, "checkpoint_every_steps": 1, "checkpoint_every_s": None, "lr": 1e-3},
        "logging": {
            "run_root": str(tmp_path / "runs"),
            "run_name": "adventure",
            "progress": False,
            "wandb_mode": "disabled",
        },
    }
    path = tmp_path / f"{env_id.split(':')[1].lower()}-{len(list(tmp_path.glob('*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _agentrl(tmp_path: Path, *args: str, log: Path | None = None) -> subprocess.Popen[str]:
    """``python -m agentrl ARGS`` as a user runs it in the env's directory, this checkout's code first."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    out = log.open("a") if log is not None else subprocess.PIPE
    return subprocess.Popen(
        [sys.executable, "-m", "agentrl", *args], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, text=True
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out or ""


def _wait_for(predicate: Any, proc: subprocess.Popen[str], what: str, timeout: float = 300) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"the job ended (rc {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line)["step"] for line in lines if "episode/reward_mean" in line]


@pytest.mark.slow
def test_the_newcomers_adventure_from_a_custom_class_to_a_resume_with_only_the_run_directory(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import signal
    import time

    (tmp_path / "adventure.py").write_text(ADVENTURE, encoding="utf-8")

    # A tool typed with the env's own class: the dry run names the tool and parameter in one line.
    bad = _adventure_config(tmp_path, tiny_model_dir, "adventure:RoomObjects")
    rc, out = _finish(_agentrl(tmp_path, "train", bad.name, "--dry-run"))
    assert rc == 2, out
    error = next(line for line in out.splitlines() if line.startswith("agentrl: error:"))
    assert "tool 'enter' parameter 'room' is typed Room, which has no JSON schema" in error
    assert "Traceback" not in out
    # The healthy env passes its dry run, tools built; a typo on the command line is blamed on the command line.
    good = _adventure_config(tmp_path, tiny_model_dir)
    rc, out = _finish(_agentrl(tmp_path, "train", good.name, "--dry-run"))
    assert rc == 0 and "tool schemas built (go, take)" in out, out
    rc, out = _finish(_agentrl(tmp_path, "train", good.name, "trainer.stpes=3", "--dry-run"))
    assert rc == 2 and "[set on the command line: trainer.stpes=3]" in out, out

    # A step that raises: the run stops on the drop alarm, the traceback (file and line) is in the run directory.
    raising = _adventure_config(tmp_path, tiny_model_dir, kwargs={"fault": "raise"})
    (tmp_path / "runs" / "adventure").mkdir(parents=True, exist_ok=True)
    rc, out = _finish(_agentrl(tmp_path, "train", raising.name, "logging.run_name=raising"))
    assert rc == 2 and "Adventure.step raised KeyError: 'hall-typo'" in out, out[-3000:]
    kept = sorted((tmp_path / "runs" / "raising" / "env_errors").glob("*.txt"))
    assert kept and 'adventure.py", line' in kept[-1].read_text() and "in _grade" in kept[-1].read_text()
    assert 'adventure.py", line' in out  # printed too

    # A step that blocks: env.step_timeout_s fails those episodes and the drop alarm ends the run with a clear error.
    blocking = _adventure_config(tmp_path, tiny_model_dir, kwargs={"fault": "block"}, step_timeout_s=2)
    rc, out = _finish(_agentrl(tmp_path, "train", blocking.name, "logging.run_name=blocking"))
    assert rc == 2 and "did not return within env.step_timeout_s=2 s" in out, out[-3000:]

    # Without a timeout, Ctrl-C twice ends the job although a step is blocked (it used to hang joining the thread).
    marker = tmp_path / "blocked"
    hang = _adventure_config(tmp_path, tiny_model_dir, kwargs={"fault": "block", "marker": str(marker)})
    proc = _agentrl(tmp_path, "train", hang.name, "logging.run_name=hang")
    _wait_for(marker.exists, proc, "a step blocked")
    proc.send_signal(signal.SIGINT)
    time.sleep(1.0)  # past the repeat window: a second, separate Ctrl-C
    proc.send_signal(signal.SIGINT)
    rc, out = _finish(proc, timeout=60)
    assert rc == 130 and "a second stop signal" in out, out[-3000:]
    assert "Resume with: agentrl train --resume" in out

    # The healthy run: killed after its first checkpoint, resumed with only the run directory, stopped with
    # Ctrl-C (its hint is the real command), and resumed again to the end.
    run_dir = tmp_path / "runs" / "adventure"
    log = tmp_path / "train.log"
    proc = _agentrl(tmp_path, "train", good.name, "trainer.steps=4", log=log)
    _wait_for(lambda: (run_dir / "checkpoints" / "latest").exists(), proc, "the first checkpoint")
    proc.kill()
    proc.wait(timeout=60)
    assert (run_dir / "config.yaml").is_file()
    (tmp_path / good.name).unlink()  # the original config is gone: the run directory must be enough
    proc = _agentrl(tmp_path, "train", "--resume", str(run_dir), log=log)
    done_before = len(_steps(run_dir))
    _wait_for(lambda: len(_steps(run_dir)) > done_before, proc, "a resumed step")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=300) == 130, log.read_text()[-3000:]
    assert f"Resume with: agentrl train --resume {run_dir}" in log.read_text()
    rc, out = _finish(_agentrl(tmp_path, "train", "--resume", str(run_dir), "trainer.steps=6"))
    assert rc == 2 and "trainer.steps: 4 in the run, 6 now" in out, out[-3000:]  # not 40/6 silently
    rc, out = _finish(_agentrl(tmp_path, "train", "--resume", str(run_dir)))
    assert rc == 0, out[-3000:]
    assert _steps(run_dir) == [1, 2, 3, 4]
    assert (run_dir / "plots.png").is_file()
