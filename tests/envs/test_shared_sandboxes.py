"""Envs share warm sandboxes through the process's pools: a closed env's session sandbox is the next env's,
a grading sandbox serves one grading and is replaced by a fresh one, and nothing of one owner reaches the next
(attacks across env instances instead of episodes)."""

from __future__ import annotations

import uuid

from cross_episode_hacks import ANSWER_LEARNING, fill

from sandboxes.shared import shared_pool

# A background process is stopped when its cell ends (``kill_background``; tests/sandboxes cover reset's kill).
LEAVE = "import os\nos.makedirs('/dev/shm/left-by-a', exist_ok=True)\nopen('notes.txt', 'w').write('a')\nkept = 41"
LOOK = "import os\nprint('left-by-a' in os.listdir('/dev/shm'), 'notes.txt' in os.listdir('.'), 'kept' in globals())"


def test_the_next_env_gets_the_closed_envs_session_sandbox_wiped(sandbox_kind: str) -> None:
    from envs.code_exec import CodeExecEnv

    settings = {"kind": sandbox_kind}
    first = CodeExecEnv(split="all", max_turns=3, sandbox=settings)
    first.reset(seed=0)
    first.step(f"```python\n{LEAVE}\n```")
    seen = str(first.step(f"```python\n{LOOK}\n```")[0][0]["content"])
    assert "True True True" in seen, seen  # the look finds all three while they are there
    used = first.sandbox
    first.close()
    second = CodeExecEnv(split="all", max_turns=3, sandbox=settings)
    try:
        second.reset(seed=0)
        shown = str(second.step(f"```python\n{LOOK}\n```")[0][0]["content"])
        assert second.sandbox is used  # the test exercises reuse, not a fresh sandbox
    finally:
        second.close()
    assert "False False False" in shown, shown


def test_notes_a_graded_draft_keeps_score_zero_across_env_instances(sandbox_kind: str) -> None:
    from envs.code_exec import CodeExecEnv
    from envs.code_exec.tasks import load_tasks

    task = next(task for task in load_tasks("humaneval") if task.task_id == "HumanEval/0")
    settings = {"kind": sandbox_kind}
    config = CodeExecEnv(tasks="humaneval", split="all", sandbox=settings).config.sandbox
    grading = shared_pool(config, "grading", single_use=True)
    started, handed_out, ready = grading.started, grading.handed_out, len(grading._free) + grading._refilling
    action = f"```python\n{fill(ANSWER_LEARNING, task.entry_point, TOKEN=uuid.uuid4().hex)}```"
    rewards = []
    for episode in range(12):  # a new env each time: only the shared grading sandbox could carry the notes
        env = CodeExecEnv(tasks="humaneval", split="all", max_turns=1, sandbox=settings)
        try:
            env.reset(seed=episode, options={"task_id": task.task_id})
            rewards.append(env.step(action)[1])
        finally:
            env.close()
    assert rewards == [0.0] * 12
    assert grading.handed_out - handed_out == 12  # twelve gradings, each in a sandbox of its own
    # never reused: each one was ready or starting before, or started since (ahead of demand)
    assert grading.started - started + ready >= 12


def test_session_and_grading_sandboxes_never_swap_roles(sandbox_kind: str) -> None:
    from envs.code_agent import CodeAgentEnv

    env = CodeAgentEnv(split="all", max_turns=2, sandbox={"kind": sandbox_kind})
    try:
        env.reset(seed=0)
        env.step(f"```python\n{env.task.solution}\n```")  # a draft: run in the session, checked in grading
        with env.grading_sandbox() as graded:
            assert graded is not env.sandbox
        session_pool = shared_pool(env.config.sandbox, "session")
        grading_pool = shared_pool(env.config.sandbox, "grading", single_use=True)
        assert not {id(s) for s in session_pool._all} & {id(s) for s in grading_pool._all}
    finally:
        env.close()
