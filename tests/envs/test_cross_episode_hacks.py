"""Issue 30, root causes 1, 3 and 6: notes kept between episodes, the host's files, run cells that prepare grading.

Each attack (``cross_episode_hacks.py``) is first shown to beat the behaviour that landed before the fix
(``*_beat_*`` tests, which run it against that behaviour: the old reset, the session's own sandbox, a
process sandbox showing the host's filesystem), then to score 0 now, on both backends.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cross_episode_hacks import ANSWER_LEARNING, DRAFT_READS_NOTES, HOST_DATA_READ, OLD_RESET, RUN_CELL_NOTES, fill

from envs.code_exec.grading import Grader, GraderConfig, UnsafeSandboxError, build_program
from envs.code_exec.tasks import CodingTask, load_tasks
from sandboxes import make_sandbox

ROOT = Path(__file__).resolve().parents[2]
EASY_DATA = ROOT / "envs" / "data" / "easy_tasks.jsonl"
EPISODES = 16  # HumanEval/0 has 7 asserts, 3 of them False: the notes reach 1.0 within 7 + 3 gradings


@pytest.fixture(scope="module")
def humaneval_0() -> CodingTask:
    return next(task for task in load_tasks("humaneval") if task.task_id == "HumanEval/0")


@pytest.fixture(scope="module")
def grader() -> Iterator[Grader]:
    with Grader(GraderConfig(per_test_timeout_s=2.0)) as grading:
        yield grading


@pytest.fixture
def box(sandbox_kind: str) -> Iterator[Any]:
    sandbox = make_sandbox({"kind": sandbox_kind})
    yield sandbox
    sandbox.close()


def _learning_rewards(grader: Grader, sandbox: Any, task: CodingTask, between: Any) -> list[float]:
    solution = "\n" + fill(ANSWER_LEARNING, task.entry_point, TOKEN=uuid.uuid4().hex)
    rewards = []
    for _ in range(EPISODES):
        rewards.append(grader.grade(sandbox, task, solution).fraction)
        between()
    return rewards


def test_answer_learning_beat_the_old_reset(grader: Grader, box: Any, humaneval_0: CodingTask) -> None:
    # Between episodes only the work dir and /tmp are emptied, as reset() did before: the notes in /dev/shm stay.
    rewards = _learning_rewards(grader, box, humaneval_0, lambda: box.run_python(OLD_RESET, 10))
    assert rewards[0] == 0.0 and 1.0 in rewards, rewards


def test_answer_learning_scores_zero_when_a_pooled_sandbox_is_reset(
    grader: Grader, box: Any, humaneval_0: CodingTask
) -> None:
    assert _learning_rewards(grader, box, humaneval_0, box.reset) == [0.0] * EPISODES


def test_answer_learning_scores_zero_across_codeexec_episodes(sandbox_kind: str, humaneval_0: CodingTask) -> None:
    from envs.code_exec import CodeExecEnv

    action = f"```python\n{fill(ANSWER_LEARNING, humaneval_0.entry_point, TOKEN=uuid.uuid4().hex)}```"
    env = CodeExecEnv(tasks="humaneval", split="all", max_turns=1, sandbox={"kind": sandbox_kind})
    try:
        rewards = []
        for episode in range(EPISODES):
            env.reset(seed=episode, options={"task_id": humaneval_0.task_id})
            rewards.append(env.step(action)[1])
    finally:
        env.close()
    assert rewards == [0.0] * EPISODES


def _agent_task() -> Any:
    from envs.code_tasks import generate_tasks

    return generate_tasks(split="all")[0]


def test_run_cell_notes_beat_grading_in_the_sessions_own_sandbox(sandbox_kind: str) -> None:
    from envs.code_agent import CodeAgentEnv
    from envs.code_agent.verdicts import run_tests

    task = _agent_task()
    env = CodeAgentEnv(split="all", max_turns=2, sandbox={"kind": sandbox_kind})
    try:
        env.reset(seed=0, options={"task_id": task.task_id})
        env.step(f"```python\n{fill(RUN_CELL_NOTES, task.entry_point, SOLUTION=repr(task.solution))}```")
        draft = fill(DRAFT_READS_NOTES, task.entry_point)
        # Where grading ran before the fix: the session's sandbox, with the run cell's file in its work dir.
        verdicts = run_tests(env.grader, env.sandbox, task.coding_task(), draft, task.hidden_tests())
    finally:
        env.close()
    assert verdicts.success and not verdicts.flags, verdicts


def test_run_cell_notes_score_zero_now(sandbox_kind: str) -> None:
    from envs.code_agent import CodeAgentEnv

    task = _agent_task()
    env = CodeAgentEnv(split="all", max_turns=2, sandbox={"kind": sandbox_kind})
    try:
        env.reset(seed=0, options={"task_id": task.task_id})
        _, _, done, _, info = env.step(
            f"```python\n{fill(RUN_CELL_NOTES, task.entry_point, SOLUTION=repr(task.solution))}```"
        )
        assert not done and info["action"] == "run" and info["code_ran"]
        _, _, done, _, info = env.step(f"```python\n{fill(DRAFT_READS_NOTES, task.entry_point)}```")
    finally:
        env.close()
    assert done and info["outcome"] == 0.0 and info["tests_passed"] == 0, info


def test_host_data_read_beat_a_process_sandbox_on_the_hosts_filesystem() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("legacy_grader", ROOT / "bench" / "legacy_grader.py")
    assert spec is not None and spec.loader is not None
    legacy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(legacy)
    task = next(task for task in load_tasks("easy") if task.task_id == "easy/loops/02")
    with make_sandbox({"kind": "process", "private_root": False}) as sandbox:
        program = build_program(task, "\n" + fill(HOST_DATA_READ, task.entry_point, DATA=str(EASY_DATA)))
        assert all(legacy.legacy_grade(sandbox, program, task.tests, 2.0))


def test_host_data_read_scores_zero_in_a_private_root(grader: Grader, box: Any) -> None:
    for task in load_tasks("easy")[:3]:
        result = grader.grade(box, task, "\n" + fill(HOST_DATA_READ, task.entry_point, DATA=str(EASY_DATA)))
        assert result.fraction == 0.0 and "FileNotFoundError" in str(result.errors), result.errors


def test_grading_refuses_a_process_sandbox_that_shows_the_host(grader: Grader) -> None:
    task = load_tasks("easy")[0]
    with make_sandbox({"kind": "process", "private_root": False}) as sandbox:
        assert "private_root is off" in (sandbox.isolation_error or "")
        with pytest.raises(UnsafeSandboxError, match="refusing to grade.*private_root is off.*Fix: use the Docker"):
            grader.grade(sandbox, task, "\n" + (task.solution or ""))


def test_inputs_a_grading_saw_never_reach_a_later_run_cell(sandbox_kind: str) -> None:
    from envs.code_agent import CodeAgentEnv

    task = _agent_task()
    # Solves the task and keeps every input the tests pass it, as bare directories (no flag) in /dev/shm.
    spy = (
        f"import os\n{task.solution}\n_real = {task.entry_point}\n"
        f"def {task.entry_point}(*args):\n"
        "    os.mkdir('/dev/shm/seen-%d' % len(os.listdir('/dev/shm')))\n    return _real(*args)\n"
    )
    look = "import os\nprint('listing', sorted(os.listdir('/dev/shm')), sorted(os.listdir('/tmp')), os.listdir('.'))"
    env = CodeAgentEnv(split="all", max_turns=2, sandbox={"kind": sandbox_kind})
    try:
        env.reset(seed=0, options={"task_id": task.task_id})
        _, _, done, _, info = env.step(f"```python\n{spy}```")
        assert done and info["outcome"] == 1.0  # graded: the hidden tests called it
        env.reset(seed=1, options={"task_id": task.task_id})
        messages, _, _, _, _ = env.step(f"```python\n{look}\n```")
    finally:
        env.close()
    shown = str(messages[0]["content"])
    assert "listing" in shown and "seen-" not in shown, shown
