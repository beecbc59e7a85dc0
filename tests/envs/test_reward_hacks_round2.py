"""Round 2 of the adversarial grading suite (issue 30): attacks on what surrounds the judge.

Each attack is first shown to beat the grader as it landed (commit ``LANDED``, taken from git history and run
in a fresh interpreter by attack_runner.py), then scored 0 or flagged by this tree's grader: in this process
(as root: the process backend drops to a private uid) on both backends, and as a non-root trainer in a
subprocess of another uid, where the process backend must refuse to grade unless told the code is trusted.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from other_uid import as_uid, python_for_uid
from reward_hacks import ATTACKS, EXPLOITS

from envs.code_exec.grading import Grader, GraderConfig, GradeResult
from envs.code_exec.tasks import CodingTask, load_tasks
from sandboxes import docker_available, make_sandbox

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).resolve().parent / "attack_runner.py"
LANDED = "a7c874735aa08afb226ebe2e8bdf3e6681fb2315"  # issue 15's grader, before issue 30
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
NON_ROOT_UID = 65532  # not the judge's 65533, not the containers' 65534
BACKENDS = ["process", pytest.param("docker", marks=pytest.mark.docker)]
# A process sandbox without namespaces: what a non-root trainer gets where unshare fails (an unprivileged container).
NO_USERNS = {"kind": "process", "isolate_network": False}
# The landed sandbox's view (before issue 30's minimal root): no jail, no user namespace, the trainer's /proc in
# reach. The proofs on the landed grader and the forced-grading test use it; the jail alone would stop the attack.
NO_JAIL = {**NO_USERNS, "private_root": False}
ATTACK = {attack.name: attack for attack in ATTACKS}


@pytest.fixture(scope="module")
def easy() -> CodingTask:
    return {t.task_id: t for t in load_tasks("easy")}["easy/arithmetic/01"]


@pytest.fixture(scope="module", params=BACKENDS)
def sandbox(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "docker" and not docker_available():
        pytest.skip("no Docker engine with the sandbox image (run scripts/test.sh to set them up)")
    if request.param == "process" and os.geteuid() != 0:
        pytest.skip("in-process grading on the process backend needs a root trainer (the non-root tests cover it)")
    box = make_sandbox({"kind": request.param})
    yield box
    box.close()


@pytest.fixture(scope="module")
def grader() -> Iterator[Grader]:
    with Grader(GraderConfig(per_test_timeout_s=1.0)) as grading:
        yield grading


@pytest.fixture(scope="module")
def landed() -> Iterator[str]:
    """The landed grading package, extracted from git history (readable by the non-root trainer's uid, so not under
    pytest's own temp dir, which only its owner can enter)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", LANDED, "envs/code_exec/grading"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        pytest.skip(
            f"commit {LANDED[:7]} is not in this clone's history (fetch it to run the proofs on the landed "
            f"grader): {archive.stderr.decode(errors='replace')[:200]}"
        )
    dest = Path(tempfile.mkdtemp(prefix="agentrl-landed-"))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(dest, filter="data")
        for path in [dest, *dest.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield str(dest)
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def run_attack(
    solution: str,
    task: CodingTask,
    tmp_path: Path,
    *,
    landed: str | None = None,
    non_root: bool = False,
    sandbox: dict[str, Any] | None = None,
    require_host_isolation: bool = True,
) -> dict[str, Any]:
    """Grade ``solution`` in a fresh interpreter (as a non-root uid when asked and we are root), in a sandbox made
    from ``sandbox`` (a process sandbox by default)."""
    tmp_path.chmod(0o777)
    args = {
        "landed": landed,
        "sandbox": sandbox or {"kind": "process"},
        "task": task.model_dump(),
        "solution": solution,
        "require_host_isolation": require_host_isolation,
    }
    uid = NON_ROOT_UID if non_root and os.geteuid() == 0 else None
    python, env = python_for_uid(uid) if uid is not None else (sys.executable, {"PATH": SAFE_PATH})
    env = {"PYTHONPATH": f"{ROOT}:{sysconfig.get_paths()['purelib']}", **env, "HOME": str(tmp_path)}
    proc = subprocess.run(
        [python, str(RUNNER), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
        preexec_fn=(lambda: as_uid(uid)) if uid is not None else None,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def attack_source(name: str, task: CodingTask) -> str:
    return "\n" + ATTACK[name].solution(task.entry_point, task.solution or "")


def kinds(result: GradeResult) -> set[tuple[str, str]]:
    return {(flag.kind, flag.source) for flag in result.flags}


def test_every_root_cause_this_branch_owns_has_an_attack_and_the_docs_name_the_tests_that_show_it() -> None:
    assert {attack.cause for attack in ATTACKS} >= {2, 4, 5, 8}
    assert all(attack.on_landed for attack in ATTACKS)
    assert not {a.name for a in ATTACKS} & {e.name for e in EXPLOITS}
    text = (ROOT / "docs" / "sandbox-security.md").read_text(encoding="utf-8")
    table = text[text.index("### Round 2") :].split("\n\n")[2]
    for attack in ATTACKS:
        assert f"| `{attack.name}` ({attack.cause}) |" in table, attack.name
    named = set(re.findall(r"`(test_\w+)`", table))
    assert named and named <= {name for name in globals() if name.startswith("test_")}, named - set(globals())


# ---- 2: forged verdict frames in the trainer's pipes ------------------------------------------------------------
def test_judge_pipe_forgery_beat_the_landed_grader_as_a_non_root_trainer(
    easy: CodingTask, landed: str, tmp_path: Path
) -> None:
    out = run_attack(
        attack_source("judge_pipe_forgery", easy), easy, tmp_path, landed=landed, non_root=True, sandbox=NO_JAIL
    )
    assert out["raised"] is None and out["fraction"] == 1.0 and out["flags"] == [], out


@pytest.mark.parametrize("sandbox", [{"kind": "process"}, NO_USERNS], ids=["userns", "no_userns"])
def test_a_non_root_trainer_is_refused_grading_on_the_process_backend(
    sandbox: dict[str, Any], easy: CodingTask, tmp_path: Path
) -> None:
    out = run_attack(attack_source("judge_pipe_forgery", easy), easy, tmp_path, non_root=True, sandbox=sandbox)
    assert out["raised"] and out["raised"].startswith("UnsafeSandboxError"), out
    assert "Docker" in out["raised"] and "root" in out["raised"] and "/proc" in out["raised"]


def test_forged_frames_are_tampering_even_where_the_sandbox_can_write_the_judges_pipes(
    easy: CodingTask, tmp_path: Path
) -> None:
    # Told the code is trusted, a non-root trainer grades anyway: the frames reach the relay and fail authentication.
    solution = attack_source("judge_pipe_forgery", easy)
    out = run_attack(solution, easy, tmp_path, non_root=True, sandbox=NO_JAIL, require_host_isolation=False)
    assert out["raised"] is None and out["fraction"] == 0.0, out
    assert ["channel_tampering", "host"] in out["flags"], out
    assert any("judge channel" in error for error in out["errors"]), out


def test_judge_pipe_forgery_scores_zero_as_root(sandbox: Any, grader: Grader, easy: CodingTask) -> None:
    result = grader.grade(sandbox, easy, attack_source("judge_pipe_forgery", easy))
    assert result.fraction == 0.0 and ("introspection", "static") in kinds(result)  # walk_stack, seen in the source


# ---- 4: malformed input on a channel, and crashes in grading ----------------------------------------------------
def test_a_malformed_flag_line_dropped_the_episode_on_the_landed_grader(
    easy: CodingTask, landed: str, tmp_path: Path
) -> None:
    out = run_attack(attack_source("malformed_flag_line", easy), easy, tmp_path, landed=landed)
    assert out["raised"] and out["raised"].startswith("RecursionError"), out


def test_a_malformed_flag_line_voids_the_grading(sandbox: Any, grader: Grader, easy: CodingTask) -> None:
    result = grader.grade(sandbox, easy, attack_source("malformed_flag_line", easy))
    assert result.fraction == 0.0 and ("channel_tampering", "host") in kinds(result), result.flags
    assert all(error.startswith(f"test {i}: void: channel_tampering") for i, error in enumerate(result.errors))


def test_a_crash_in_grading_is_a_flagged_zero_with_its_reason(grader: Grader, easy: CodingTask) -> None:
    box = make_sandbox({"kind": "process"} if os.geteuid() == 0 else {"kind": "docker"})
    box.close()  # a real fault: the sandbox is gone when grading starts
    result = grader.grade(box, easy, "\n" + (easy.solution or ""))
    assert result.fraction == 0.0 and len(result.verdicts) == len(easy.tests)
    assert [(f.kind, f.source) for f in result.flags] == [("grading_error", "host")]
    assert "SandboxClosedError" in result.flags[0].detail


def test_a_judge_killed_mid_job_is_a_flagged_zero_not_a_silently_missing_verdict(easy: CodingTask) -> None:
    import signal
    import threading

    if os.geteuid() != 0:
        pytest.skip("a non-root trainer is refused grading on the process backend")
    slow = "import time\ndef add_three(x):\n    time.sleep(0.5)\n    return x + 3\n"
    with make_sandbox({"kind": "process"}) as box, Grader(GraderConfig(per_test_timeout_s=3.0)) as grading:
        judge = grading._judge
        done = threading.Event()

        def kill_the_job_child() -> None:  # a real fault: the child dies while the first test waits on the solution
            while judge._child is None and not done.wait(0.01):
                pass
            if not done.wait(0.2) and judge._child is not None:
                os.kill(judge._child, signal.SIGKILL)

        killer = threading.Thread(target=kill_the_job_child)
        killer.start()
        try:
            result = grading.grade(box, easy, slow)
        finally:
            done.set()
            killer.join()
    assert result.fraction == 0.0 and ("grading_error", "host") in kinds(result), result.flags
    assert any("ended before its verdicts" in flag.detail for flag in result.flags)


# ---- 5: what is trusted: detection from outside the solution's interpreter --------------------------------------
def test_the_blinded_monitor_hid_everything_on_the_landed_grader(easy: CodingTask, landed: str, tmp_path: Path) -> None:
    for name in ("monitor_blinding", "proc_double_slash"):
        out = run_attack(attack_source(name, easy), easy, tmp_path, landed=landed)
        assert out["raised"] is None and out["fraction"] == 1.0 and out["flags"] == [], (name, out)


def test_a_blinded_monitor_leaves_the_outside_flags(sandbox: Any, grader: Grader, easy: CodingTask) -> None:
    result = grader.grade(sandbox, easy, attack_source("monitor_blinding", easy))
    # The verdicts are the judge's (the answer is right); the flag comes from the source, which it cannot blind.
    assert result.fraction == 1.0 and ("introspection", "static") in kinds(result), result.flags
    assert not any(flag.source == "runtime" for flag in result.flags)  # the monitor was blinded: advisory only
    result = grader.grade(sandbox, easy, attack_source("proc_double_slash", easy))
    assert {("proc_access", "static"), ("proc_access", "runtime")} <= kinds(result), result.flags


def test_a_blinded_monitor_still_zeroes_the_episode_when_flags_zero_rewards(sandbox_kind: str) -> None:
    from envs.code_exec import CodeExecEnv

    if sandbox_kind == "process" and os.geteuid() != 0:
        pytest.skip("the process backend refuses to grade for a non-root trainer")
    env = CodeExecEnv(
        tasks="easy", split="all", max_turns=1, zero_reward_if_flagged=True, sandbox={"kind": sandbox_kind}
    )
    try:
        env.reset(seed=0, options={"task_id": "easy/arithmetic/01"})
        source = ATTACK["monitor_blinding"].solution("add_three", "def add_three(x):\n    return x + 3\n")
        _, reward, terminated, _, info = env.step(f"```python\n{source}```")
    finally:
        env.close()
    assert terminated and reward == 0.0 and any(f.startswith("introspection: source") for f in info["hack_flags"])


# ---- 8: the codec's depth cap and the judge's decode work -------------------------------------------------------
DEEP = "def f(n):\n    x = 0\n    for _ in range(n):\n        x = [x]\n    return x\n"
DEEP_TESTS = [
    "x = 0\nfor _ in range(150):\n    x = [x]\nassert f(150) == x",  # an honest deep answer arrives exactly
    "x = f(100000)\nfor _ in range(200):\n    x = x[0]\nassert 'from the solution' in repr(x)",  # cut cleanly
]


def deep_task() -> CodingTask:
    return CodingTask(task_id="t/deep", kind="t", prompt="-", entry_point="f", tests=DEEP_TESTS, code_prefix="")


def test_deep_answers_were_tampering_or_a_recursion_error_on_the_landed_grader(landed: str, tmp_path: Path) -> None:
    out = run_attack(DEEP, deep_task(), tmp_path, landed=landed)
    assert out["fraction"] == 0.0 and ["channel_tampering", "host"] in out["flags"], out


def test_deep_answers_are_exact_up_to_the_cap_and_cut_cleanly_beyond(sandbox: Any, grader: Grader) -> None:
    result = grader.grade(sandbox, deep_task(), DEEP)
    assert result.passed == [True, True] and result.flags == [], (result.errors, result.flags)


def test_a_hash_flood_ran_the_judge_to_its_time_limit_on_the_landed_grader(
    easy: CodingTask, landed: str, tmp_path: Path
) -> None:
    out = run_attack(attack_source("hash_flood", easy), easy, tmp_path, landed=landed)
    assert out["fraction"] == 0.0 and "time limit" in out["errors"][0], out  # the judge was killed at its limit


def test_a_hash_flood_is_refused_by_size_not_by_time(sandbox: Any, grader: Grader, easy: CodingTask) -> None:
    result = grader.grade(sandbox, easy, attack_source("hash_flood", easy))
    assert result.fraction == 0.0 and not result.timed_out
    assert all("keys of one hash" in error for error in result.errors), result.errors
