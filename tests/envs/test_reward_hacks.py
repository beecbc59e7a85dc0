"""The adversarial grading suite: every exploit class scores 0 (blocked) and/or is flagged (detected), exactly as
docs/sandbox-security.md lists it, on bundled tasks and HumanEval, on both sandbox backends.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from reward_hacks import EXPLOITS, Exploit

from envs.code_exec.grading import Grader, GraderConfig, build_program
from envs.code_exec.tasks import CodingTask, load_tasks
from sandboxes import docker_available, make_sandbox

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "sandbox-security.md"
BACKENDS = ["process", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(scope="module")
def tasks() -> dict[str, CodingTask]:
    return {t.task_id: t for t in load_tasks("easy") + load_tasks("humaneval")}


@pytest.fixture(scope="module", params=BACKENDS)
def sandbox(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "docker" and not docker_available():
        pytest.skip("no Docker engine with the sandbox image (run scripts/test.sh to set them up)")
    box = make_sandbox({"kind": request.param})
    yield box
    box.close()


@pytest.fixture(scope="module")
def grader() -> Iterator[Grader]:
    with Grader(GraderConfig(per_test_timeout_s=1.0)) as grading:
        yield grading


DETECTION = {"outside": "outside", "in-process": "in-process (advisory)", "": "none"}


def test_at_least_ten_classes_and_the_docs_list_each_with_its_outcome_and_where_it_is_enforced() -> None:
    doc = DOC.read_text(encoding="utf-8")
    start = doc.index("### The exploit classes and their outcome")  # this table; other sections have their own
    text = doc[start : doc.index("\n### ", start + 1)]
    rows = re.findall(
        r"^\| `(\w+)` \|[^|]*\| ((?:blocked|detected)[^|]*?) \| ([^|]*?) \| ([^|]*?) \|$", text, re.MULTILINE
    )
    documented = {name: (outcome, blocked, detection) for name, outcome, blocked, detection in rows}
    expected = {
        e.name: (
            e.outcome + (": " + ", ".join(f"`{kind}`" for kind in e.flags) if e.flags else ""),
            e.blocked_by,
            DETECTION[e.detection],
        )
        for e in EXPLOITS
    }
    assert len(EXPLOITS) >= 10 and documented == expected


@pytest.mark.parametrize("exploit", EXPLOITS, ids=[e.name for e in EXPLOITS])
def test_exploit_scores_zero_and_is_flagged_as_documented(
    exploit: Exploit, sandbox: Any, grader: Grader, tasks: dict[str, CodingTask]
) -> None:
    for task_id in exploit.targets:
        task = tasks[task_id]
        result = grader.grade(sandbox, task, "\n" + exploit.solution(task.entry_point))
        assert result.fraction == 0.0, (task_id, result.errors)  # blocked, whatever was flagged
        kinds = {flag.kind for flag in result.flags}
        assert set(exploit.flags) <= kinds, (task_id, result.flags)  # detected
        assert ("detected" in exploit.outcome) == bool(exploit.flags) == bool(exploit.detection)
        outside = any(flag.outside for flag in result.flags if flag.kind in exploit.flags)
        assert outside == (exploit.detection == "outside"), (task_id, result.flags)  # where the docs say


def _legacy_grade() -> Any:
    spec = importlib.util.spec_from_file_location("legacy_grader", ROOT / "bench" / "legacy_grader.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.legacy_grade


@pytest.mark.parametrize("exploit", [e for e in EXPLOITS if e.beat_old_grader], ids=lambda e: e.name)
def test_the_exploit_is_real_it_beat_the_old_in_process_grader(exploit: Exploit, tasks: dict[str, CodingTask]) -> None:
    legacy_grade = _legacy_grade()
    with make_sandbox({"kind": "process"}) as sandbox:
        for task_id in exploit.targets:
            task = tasks[task_id]
            program = build_program(task, "\n" + exploit.solution(task.entry_point))
            assert all(legacy_grade(sandbox, program, task.tests, 1.0)), task_id


def test_codeexec_reports_flags_and_can_zero_a_flagged_reward() -> None:
    from envs.code_exec import CodeExecEnv

    # Solves the task, but introspects frames on the way: flagged, and zeroed only when asked.
    code = "import sys\ndef add_three(x):\n    sys._getframe(0)\n    return x + 3\n"
    action = f"```python\n{code}```"
    for zero, expected in ((False, 1.0), (True, 0.0)):
        env = CodeExecEnv(
            tasks="easy", split="all", max_turns=1, zero_reward_if_flagged=zero, sandbox={"kind": "process"}
        )
        try:
            env.reset(seed=0, options={"task_id": "easy/arithmetic/01"})
            _, reward, terminated, _, info = env.step(action)
        finally:
            env.close()
        assert terminated and reward == expected and info["success"] is (not zero)
        assert any(flag.startswith("introspection: ") for flag in info["hack_flags"])
        assert info.get("outcome") == (0.0 if zero else None)


def test_the_judge_is_out_of_the_solutions_reach(grader: Grader, tasks: dict[str, CodingTask]) -> None:
    import os

    with make_sandbox({"kind": "process"}) as sandbox:
        grader.grade(sandbox, tasks["easy/arithmetic/01"], "def add_three(x):\n    return x + 3\n")
    pid = grader._judge._proc.pid  # type: ignore[union-attr]
    # Non-dumpable: its /proc files belong to root, so no other uid can read its memory or descriptors.
    assert os.stat(f"/proc/{pid}/environ").st_uid == 0
    with open(f"/proc/{pid}/status") as fh:
        uids = next(line.split()[1:] for line in fh if line.startswith("Uid:"))
    expected = str(GraderConfig().judge_uid) if os.geteuid() == 0 else str(os.geteuid())
    assert uids == [expected] * 4  # not the sandbox's 65534, not root


def test_codeagent_grades_across_the_boundary_an_always_equal_draft_scores_zero(sandbox_kind: str) -> None:
    from envs.code_agent import CodeAgentEnv
    from envs.code_tasks import generate_tasks

    # The main job's env: an always-equal object passes `assert f(x) == y` in-process; here it must not.
    exploit = next(e for e in EXPLOITS if e.name == "always_equal")
    task = generate_tasks(split="all")[0]
    draft = f"```python\n{exploit.solution(task.entry_point)}```"
    for zero in (False, True):
        env = CodeAgentEnv(split="all", max_turns=2, zero_reward_if_flagged=zero, sandbox={"kind": sandbox_kind})
        try:
            env.reset(seed=0, options={"task_id": task.task_id})
            _, reward, terminated, _, info = env.step(draft)  # a draft: checked on the visible examples
            assert not terminated and reward == 0.0 and info["examples_passed"] == 0
            assert any(flag.startswith("custom_comparison: ") for flag in info["hack_flags"])
            _, reward, terminated, _, info = env.step(draft)  # last turn: graded by the hidden tests
        finally:
            env.close()
        assert terminated and info["outcome"] == 0.0 and info["tests_passed"] == 0 and not info["success"]
        assert any(flag.startswith("custom_comparison: ") for flag in info["hack_flags"])


def test_codeagent_can_zero_a_flagged_episode_that_solves_the_task() -> None:
    from envs.code_agent import CodeAgentEnv
    from envs.code_tasks import generate_tasks

    task = generate_tasks(split="all")[0]
    spy = f"import sys\n{task.solution}\n_real = {task.entry_point}\n"
    spy += f"def {task.entry_point}(*args):\n    sys._getframe(0)\n    return _real(*args)\n"
    for zero, expected in ((False, 1.0), (True, 0.0)):
        env = CodeAgentEnv(  # final_draft: a solve's shaping is paid (0.2), so zeroing it shows
            split="all",
            max_turns=1,
            zero_reward_if_flagged=zero,
            shaping_terminal="final_draft",
            sandbox={"kind": "process"},
        )
        try:
            env.reset(seed=0, options={"task_id": task.task_id})
            _, reward, terminated, _, info = env.step(f"```python\n{spy}```")
        finally:
            env.close()
        assert terminated and info["outcome"] == expected and info["success"] is (not zero)
        assert info["tests_passed"] == info["tests_total"]  # the verdicts stay true; only the reward is zeroed
        assert reward == (0.0 if zero else pytest.approx(0.2))
        assert info["reward_components"]["shaping"] == reward  # the shaping total is what was paid
        assert any(flag.startswith("introspection: ") for flag in info["hack_flags"])
