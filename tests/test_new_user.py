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
from job_harness import logged_steps

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
    done_before = len(logged_steps(run_dir))
    _wait_for(lambda: len(logged_steps(run_dir)) > done_before, proc, "a resumed step")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=300) == 130, log.read_text()[-3000:]
    assert f"Resume with: agentrl train --resume {run_dir}" in log.read_text()
    rc, out = _finish(_agentrl(tmp_path, "train", "--resume", str(run_dir), "trainer.steps=6"))
    assert rc == 2 and "trainer.steps: 4 in the run, 6 now" in out, out[-3000:]  # not 40/6 silently
    rc, out = _finish(_agentrl(tmp_path, "train", "--resume", str(run_dir)))
    assert rc == 0, out[-3000:]
    assert logged_steps(run_dir) == [1, 2, 3, 4]
    assert (run_dir / "plots.png").is_file()


# --- The newcomer's SQL analyst (from the docs): a tool env with per-turn rewards, warmed up, dry-run with a typo
# in an eval split, trained with its output in a file, killed and resumed, then served to the `openai` client.

SQL_ENV = '''
"""Answer questions about a small SQLite database with a read-only `run_sql` tool, then reply 'Answer: <n>'."""

import re
import sqlite3
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentrl.env import MultiTurnEnv, user
from agentrl.tools import execute_tool_calls
from agentrl.tools.toolcall import has_tool_call, parse_tool_calls

SPLITS = {"train": range(0, 12, 2), "test": range(1, 12, 2)}


class SqlAnalystConfig(BaseModel):
    """Constructor kwargs of SqlAnalyst."""

    model_config = ConfigDict(extra="forbid")
    split: Literal["train", "test"] = Field("train", description="train: even databases, test: odd ones.")


class SqlAnalyst(MultiTurnEnv):
    """Count rows of a generated table; 0.1 for the first valid run_sql call, 1 for the right answer."""

    max_turns = 4
    config_model = SqlAnalystConfig

    def __init__(self, **kwargs: Any) -> None:
        self.config = SqlAnalystConfig(**kwargs)
        self.db = sqlite3.connect(":memory:", check_same_thread=False)
        self.tools = (self.run_sql,)
        self.paid_call = False
        self.answer = 0

    def run_sql(self, query: str) -> str:
        """Run a read-only SQL query on the sales database.

        Args:
            query: One SELECT statement.
        """
        if not query.strip().lower().startswith("select"):
            return "Error: only SELECT statements are allowed."
        try:
            return repr(self.db.execute(query).fetchall()[:20])
        except sqlite3.Error as exc:
            return f"Error: {exc}"

    def task_ids(self) -> list[str]:
        return [f"db{i}" for i in SPLITS[self.config.split]]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        task_id = self.choose_task_id(options, self.task_ids(), f"SqlAnalyst split {self.config.split!r}")
        rows = 3 + int(task_id[2:])
        self.db.execute("DROP TABLE IF EXISTS sales")
        self.db.execute("CREATE TABLE sales (id INTEGER, amount REAL)")
        self.db.executemany("INSERT INTO sales VALUES (?, ?)", [(i, 1.5 * i) for i in range(rows)])
        self.answer, self.paid_call = rows, False
        return [user("How many rows does the sales table have? Reply 'Answer: <n>'.")], {"task_id": task_id}

    def step(self, action: str):
        if has_tool_call(action):
            valid = any(call.ok and call.name == "run_sql" for call in parse_tool_calls(action))
            credit = 0.1 if valid and not self.paid_call else 0.0  # paid once per episode (the docs' advice)
            self.paid_call = self.paid_call or valid
            info = {"reward_components": {"valid_call": credit}}
            return execute_tool_calls(action, self.tools), credit, False, False, info
        match = re.search(r"Answer:\\s*(\\d+)", action)
        correct = match is not None and int(match.group(1)) == self.answer
        info = {"success": correct, "reward_components": {"correct": float(correct)}}
        return [], float(correct), True, False, info
'''


def _sql_config(tmp_path: Path, model_dir: Path) -> Path:
    config = {
        "model": {"path": str(model_dir), "device": "cpu", "dtype": "float32"},
        "engine": {"kind": "embedded", "max_batch_size": 8, "max_seq_len": 1024},
        "env": {"id": "sql_env:SqlAnalyst"},
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 16, "max_episode_tokens": 900},
        "algorithm": {"turn_advantage": "discounted_return"},
        "trainer": {"steps": 4, "mini_batches": 1, "checkpoint_every_steps": 1, "checkpoint_every_s": None, "lr": 1e-3},
        "eval": {"splits": ["test"], "max_tasks": 2},
        "logging": {"run_root": str(tmp_path / "runs"), "run_name": "sql", "wandb_mode": "disabled"},
    }
    path = tmp_path / "sql.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _chat(rows: int) -> dict[str, Any]:
    call = '<tool_call>\n{"name": "run_sql", "arguments": {"query": "SELECT COUNT(*) FROM sales"}}\n</tool_call>'
    return {
        "messages": [
            {"role": "user", "content": "How many rows does the sales table have? Reply 'Answer: <n>'."},
            {"role": "assistant", "content": call},
            {"role": "tool", "name": "run_sql", "content": f"[({rows},)]"},
            {"role": "assistant", "content": f"Answer: {rows}"},
        ]
    }


def _serve(tmp_path: Path, model: Path, port: int) -> subprocess.Popen[str]:
    command = ["serve", "--model", str(model), "--port", str(port), "--device", "cpu", "--max-seq-len", "1024"]
    return _agentrl(tmp_path, *command)


@pytest.mark.slow
def test_the_newcomers_sql_analyst_from_the_docs_to_the_openai_client(tiny_model_dir: Path, tmp_path: Path) -> None:

    import openai

    (tmp_path / "sql_env.py").write_text(SQL_ENV, encoding="utf-8")
    # Warm-up: the working directory's env found by the script, progress as step k/N with an ETA.
    (tmp_path / "chats.jsonl").write_text("".join(json.dumps(_chat(rows)) + "\n" for rows in (3, 5, 7)))
    warm = tmp_path / "warm"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "warmup_sft.py"),
            "--model",
            str(tiny_model_dir),
            "--chats",
            "chats.jsonl",
            "--env",
            "sql_env:SqlAnalyst",
            "--out",
            str(warm),
            "--epochs",
            "2",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[warmup] step 2/2: token NLL" in done.stdout and "ETA" in done.stdout
    config = _sql_config(tmp_path, warm)

    # A typo in an eval split fails the dry run, naming the valid splits; the right one passes with no warning.
    rc, out = _finish(_agentrl(tmp_path, "train", config.name, "eval.splits=[tset]", "--dry-run"))
    assert rc == 2 and "eval.splits: env sql_env:SqlAnalyst with split 'tset' could not be built" in out, out
    assert "the env's splits are train, test" in out
    rc, out = _finish(_agentrl(tmp_path, "train", config.name, "--dry-run"))
    assert rc == 0 and "ok: eval split 'test': env built, 6 tasks" in out and "warning:" not in out, out

    # Training with its output in a file: one full line per step; killed after a checkpoint, resumed to the end.
    run_dir, log = tmp_path / "runs" / "sql", tmp_path / "train.log"
    proc = _agentrl(tmp_path, "train", config.name, log=log)
    _wait_for(lambda: (run_dir / "checkpoints" / "latest").exists(), proc, "the first checkpoint")
    proc.kill()
    proc.wait(timeout=60)
    assert proc.returncode == -9
    rc, _ = _finish(_agentrl(tmp_path, "train", "--resume", str(run_dir), log=log))
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert logged_steps(run_dir) == [1, 2, 3, 4]
    step_lines = [line for line in text.splitlines() if line.startswith("[train] step 4/4 reward")]
    assert len(step_lines) == 1 and " turns " in step_lines[0] and " tok/s " in step_lines[0]
    assert "(rollout " in step_lines[0] and "…" not in text
    assert "[eval before] test:" in text and "[eval after] test:" in text  # before the kill, after the resume

    # The latest checkpoint served to the official openai client, plain and streamed.
    port = _free_port()
    server = _serve(tmp_path, run_dir / "checkpoints" / "latest", port)
    try:
        _wait_for(lambda: _healthy(port), server, "agentrl serve", timeout=180)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        messages = [{"role": "user", "content": "How many rows does the sales table have?"}]
        reply = client.chat.completions.create(model="sql", messages=messages, max_tokens=12, temperature=0)
        stream = client.chat.completions.create(
            model="sql", messages=messages, max_tokens=12, temperature=0, stream=True
        )
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert streamed == reply.choices[0].message.content and reply.usage.completion_tokens > 0
    finally:
        server.terminate()
        out = server.communicate(timeout=60)[0]
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    assert f"[serve] model directory: {run_dir / 'checkpoints' / latest / 'model'}" in out


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _healthy(port: int) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
            return True
    except OSError:
        return False
