"""Round 3 of the adversarial grading suite: what a solution leaves behind, and what blinds the detectors.

Each attack is played through ``CodeExecEnv`` (``reset``/``step``, as a policy would) or the grader, on both
backends where it applies. Before grading sandboxes were single-use and process sandboxes' processes were killed
by uid from the host, each of them scored 1.0 unearned on a later episode, raised out of the env, or went
unflagged; here each scores 0 (or is flagged), and the episode after it is unaffected.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from envs.code_exec.grading import Grader, GraderConfig, scan_source
from envs.code_exec.grading.scan import MAX_SOURCE_CHARS
from envs.code_exec.tasks import CodingTask, load_tasks
from sandboxes import make_sandbox
from tests.envs.conftest import sandbox_settings

TASK = "easy/arithmetic/01"  # add_three(x): four hidden asserts
BACKENDS = ["process", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(scope="module")
def easy() -> CodingTask:
    return {t.task_id: t for t in load_tasks("easy")}[TASK]


def needs_root_for_process(kind: str) -> None:
    if kind == "process" and os.geteuid() != 0:
        pytest.skip("grading on the process backend needs a root trainer (private uids)")


def episode(kind: str, code: str) -> tuple[float, dict[str, Any]]:
    """One single-turn CodeExec episode of the task that submits ``code``; (reward, info)."""
    from envs.code_exec import CodeExecEnv

    env = CodeExecEnv(split="all", max_turns=1, sandbox=sandbox_settings(kind))
    try:
        env.reset(seed=0, options={"task_id": TASK})
        _, reward, _, _, info = env.step(f"```python\n{code}\n```")
        return float(reward), info
    finally:
        env.close()


def running_with_argv_part(part: str) -> list[int]:
    """Host pids (containers' included) whose command line holds ``part``, zombies excluded."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if part.encode() in cmdline and state not in (b"Z", b"X") and b"pytest" not in cmdline:
            found.append(int(entry))
    return found


# ---- a process that outlives its grading -----------------------------------------------------------------------
SURVIVOR = """
import os, signal, subprocess
NOTE = "import time\\nwhile True:\\n    open('/tmp/{token}', 'w').close()\\n    time.sleep(0.005)"
subprocess.Popen(["python3", "-c", NOTE], start_new_session=True)
os.kill(os.getppid(), signal.SIGKILL)  # the supervisor: its sweep never runs, the host restarts the session
def add_three(x):
    return x + 3
"""
# Honest-looking code that scores only where the survivor's notes reach it: 0 on its own.
READS_NOTES = """
import os
def add_three(x):
    return x + 3 if os.path.exists('/tmp/{token}') else None
"""


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_process_left_by_a_grading_reaches_no_later_grading(kind: str) -> None:
    needs_root_for_process(kind)
    token = f"note-{uuid.uuid4().hex[:12]}"
    first, _ = episode(kind, SURVIVOR.format(token=token))
    later = [episode(kind, READS_NOTES.format(token=token))[0] for _ in range(3)]
    assert later == [0.0, 0.0, 0.0], "a survivor of the first grading fed a later one"  # 1.0 each before
    assert first == 0.0  # its own grading lost its session
    deadline = time.monotonic() + 30  # the grading sandbox is removed in the background, after the step
    while running_with_argv_part(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running_with_argv_part(token) == [], "the survivor outlived its grading sandbox"


# ---- kernel state: connection state in the grading sandbox's network namespace --------------------------------------
LEAVE_STATE = """
import socket
def _leave():
    server = socket.socket()
    try:
        server.bind(("127.0.0.1", {port}))
        server.listen()
        client = socket.create_connection(("127.0.0.1", {port}))
        peer, _ = server.accept()
        client.close()  # TIME_WAIT for a minute: kernel state with no process and no file behind it
        peer.close()
    except OSError:
        pass
    finally:
        server.close()
_leave()
def add_three(x):
    return x + 3
"""
READS_STATE = """
def add_three(x):
    return x + 3 if ':%04X' % {port} in open('/proc/net/tcp').read() else None
"""


@pytest.mark.parametrize("kind", BACKENDS)
def test_connection_state_left_by_a_grading_reaches_no_later_grading(kind: str) -> None:
    needs_root_for_process(kind)
    port = 40000 + uuid.uuid4().int % 20000
    assert episode(kind, LEAVE_STATE.format(port=port))[0] == 1.0  # an honest answer, with state left behind
    assert [episode(kind, READS_STATE.format(port=port))[0] for _ in range(2)] == [0.0, 0.0]  # 1.0 on Docker before


# ---- resets that fail on odd input -----------------------------------------------------------------------------------
DEEP_TREE = """
import os
start = os.getcwd()
for _ in range(2500):
    os.mkdir("d")
    os.chdir("d")
os.chdir(start)
"""


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_tree_deeper_than_the_stack_never_raises_out_of_the_env(kind: str) -> None:
    """A run cell leaves it in the session sandbox, which the next ``env.reset`` resets (RecursionError before)."""
    from envs.code_exec import CodeExecEnv

    needs_root_for_process(kind)
    env = CodeExecEnv(split="all", max_turns=2, sandbox=sandbox_settings(kind))
    try:
        env.reset(seed=0, options={"task_id": TASK})
        env.step(f"```python\n{DEEP_TREE}\nprint('planted')\n```")
        env.reset(seed=1, options={"task_id": TASK})
        seen = env.step("```python\nimport os\nprint(os.listdir('.'))\n```")[0][0]["content"]
        assert "[]" in str(seen), seen
        _, reward, *_ = env.step(f"```python\n{DEEP_TREE}\ndef add_three(x):\n    return x + 3\n```")
        assert reward == 1.0  # graded with the tree made during loading: no error, the right verdict
    finally:
        env.close()


# ---- detection blinded ----------------------------------------------------------------------------------------------
SILENCE_MONITOR = """
import fcntl, os
def _silence():
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in range(3, 16):  # the write-only pipes past the standard three: the answers' (4) and the monitor's
        try:
            target = os.readlink('/' + 'proc/self/fd/%d' % fd)
            writing = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
        except OSError:
            continue
        if target.startswith('pipe:') and writing and fd != 4:
            os.dup2(null, fd)
_silence()
os.listdir('/' + 'proc')  # an event the monitor flags, when it can still report
def add_three(x):
    return x + 3
"""


@pytest.fixture(scope="module", params=BACKENDS)
def grading_sandbox(request: pytest.FixtureRequest) -> Iterator[Any]:
    sandbox_settings(request.param)
    needs_root_for_process(request.param)
    box = make_sandbox({"kind": request.param})
    yield box
    box.close()


def test_a_monitor_silenced_with_dup2_is_a_flag_from_outside(grading_sandbox: Any, easy: CodingTask) -> None:
    with Grader(GraderConfig(per_test_timeout_s=2.0)) as grader:
        result = grader.grade(grading_sandbox, easy, "\n" + SILENCE_MONITOR)
    kinds = {(flag.kind, flag.source) for flag in result.flags}
    assert ("monitor_silenced", "host") in kinds, result.flags  # no flag at all before
    assert result.fraction == 1.0  # detection, not blocking: the answer itself is right


def test_an_honest_solution_keeps_its_monitor_beat(grading_sandbox: Any, easy: CodingTask) -> None:
    with Grader(GraderConfig(per_test_timeout_s=2.0)) as grader:
        result = grader.grade(grading_sandbox, easy, "\n" + (easy.solution or ""))
    assert result.flags == [] and result.fraction == 1.0


def test_a_source_too_long_to_scan_is_a_flag_not_a_silent_pass(grading_sandbox: Any, easy: CodingTask) -> None:
    padding = "_pad = '''" + "a" * MAX_SOURCE_CHARS + "'''\n"  # cut anywhere in it, the source stops parsing
    source = "import ctypes\n" + padding + "def add_three(x):\n    return x + 3\n"
    assert [flag.kind for flag in scan_source(source)] == ["unscannable_source"]  # [] before: nothing seen
    with Grader(GraderConfig(per_test_timeout_s=2.0)) as grader:
        result = grader.grade(grading_sandbox, easy, "\n" + source)
    assert ("unscannable_source", "static") in {(flag.kind, flag.source) for flag in result.flags}


def test_a_completion_that_continues_its_prompt_is_scanned_after_the_prompt() -> None:
    prompt = "import signal\ndef f(x):\n    '''Return x.'''\n"
    completion = "    import ctypes\n    return x\n"
    flags = scan_source(completion, prompt + completion)
    assert [(flag.kind, flag.detail) for flag in flags] == [("native_code", "source imports ctypes (line 1)")]


def test_an_episode_scoped_grading_sandbox_serves_one_episode_only() -> None:
    """CodeAgent's ``grading_sandbox_scope: episode``: every check of an episode in one fresh sandbox, never
    another episode's."""
    from envs.code_agent import CodeAgentEnv

    needs_root_for_process("process")
    env = CodeAgentEnv(max_turns=3, grading_sandbox_scope="episode", canary_share=0.0, sandbox={"kind": "process"})
    try:
        used = []
        for seed in range(2):
            env.reset(seed=seed)
            wrong = env.task.wrong[0] if env.task.wrong else "def f():\n    pass\n"
            env.step(f"```python\n{wrong}\n```")  # a draft, checked on the visible examples
            first = env._held_grading
            env.step(f"```python\n{env.task.solution}\n```")  # passes: graded by the hidden tests
            assert first is not None and env._held_grading is not None and env._held_grading[1] is first[1]
            used.append(first[1])
        env.reset(seed=2)
        assert env._held_grading is None and used[0] is not used[1]
    finally:
        env.close()


LEAVE_A_NOTE = """
import os, pathlib
def {entry}(*args, **kwargs):
    pathlib.Path('/tmp/note-{token}').write_text('left by an earlier draft')
    return None
"""

READ_THE_NOTE = """
import os
def {entry}(*args, **kwargs):
    raise RuntimeError('note seen: ' + str(os.path.exists('/tmp/note-{token}')))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_draft_scoped_grading_sandbox_holds_one_draft_only(backend: str) -> None:
    """The default ``grading_sandbox_scope: draft``: a new draft is checked in a fresh sandbox (what the last draft
    left there is not seen), the submitted draft's hidden tests run where its examples did, and the episode's end
    gives the sandbox back."""
    from envs.code_agent import CodeAgentEnv
    from envs.code_exec.session import grading_pool

    sandbox_settings(backend)
    needs_root_for_process(backend)
    env = CodeAgentEnv(max_turns=3, canary_share=0.0, sandbox={"kind": backend})
    token = uuid.uuid4().hex
    try:
        env.reset(seed=0)
        entry = env.task.entry_point
        env.step(f"```python\n{LEAVE_A_NOTE.format(entry=entry, token=token)}\n```")
        first = env._held_grading
        assert first is not None
        text = str(env.step(f"```python\n{READ_THE_NOTE.format(entry=entry, token=token)}\n```")[0][0]["content"])
        assert "note seen: False" in text, text  # the second draft never saw the first draft's sandbox
        second = env._held_grading
        assert second is not None and second[1] is not first[1]
        handed_out = grading_pool(env.config.sandbox).handed_out
        env.step(f"```python\n{env.task.solution}\n```")  # the last turn: checked, then graded, in one sandbox
        third = env._held_grading
        assert third is not None and third[1] is not second[1]
        assert grading_pool(env.config.sandbox).handed_out - handed_out == 1
        env.reset(seed=1)
        assert env._held_grading is None
    finally:
        env.close()


def test_a_draft_whose_grading_broke_is_graded_next_in_a_fresh_sandbox() -> None:
    """The held sandbox dies between a draft's check and its hidden tests (closed for real): that grading is a
    flagged ``grading_error``, and the sandbox is given back rather than kept for the draft's next check."""
    from envs.code_agent import CodeAgentEnv

    needs_root_for_process("process")
    env = CodeAgentEnv(max_turns=2, canary_share=0.0, sandbox={"kind": "process"})
    try:
        env.reset(seed=0)
        wrong = env.task.wrong[0]
        env.step(f"```python\n{wrong}\n```")
        assert env._held_grading is not None
        env._held_grading[1].close()
        info = env.step(f"```python\n{wrong}\n```")[4]  # the last turn: the same draft, graded where it was checked
        assert any(flag.startswith("grading_error: SandboxClosedError") for flag in info["hack_flags"])
        assert env._held_grading is None
    finally:
        env.close()
