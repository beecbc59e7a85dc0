"""Grader: the host-side relay between the trusted judge and the solution's sandbox service.

``Grader.grade(sandbox, task, solution)`` loads ``task.code_prefix + solution`` in a fresh sandbox
process, starts a judge job with the task's prefix and hidden tests, and relays the judge's requests to
the solution (each bounded by the running test's deadline) until every test has a verdict.

A grading whose channels carried anything the honest parties never send (a forged judge frame, a malformed
flag line) is void: every verdict fails and a ``channel_tampering`` flag says why. A grading that crashed
for any other reason than the task's own set-up is a scored 0 with a ``grading_error`` flag, never a
dropped episode.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envs.code_exec.grading.isolation import require_isolation
from envs.code_exec.grading.judge_process import JudgeLost, JudgeProcess, JudgeTampered, JudgeTimeout
from envs.code_exec.grading.result import (
    VOIDING_KINDS,
    GradeResult,
    GradingSetupError,
    HackFlag,
    TestVerdict,
)
from envs.code_exec.grading.scan import scan_source
from envs.code_exec.grading.solution_process import SolutionProcess

MiB = 1024 * 1024
log = logging.getLogger(__name__)


class GradableTask(Protocol):
    """What grading needs of a task: the hidden tests, the function they call, the code the solution extends."""

    @property
    def tests(self) -> list[str]: ...

    @property
    def entry_point(self) -> str: ...

    @property
    def code_prefix(self) -> str: ...


def budget_problem(per_test_s: float, total_s: float | None, per_test_name: str, total_name: str) -> str | None:
    """Why a grading budget cannot work with this per-test limit (None when it can)."""
    if total_s is None or total_s >= per_test_s:
        return None
    return (
        f"{total_name} ({total_s:g} s) is below {per_test_name} ({per_test_s:g} s): one slow test would spend the "
        f"whole budget; raise {total_name} or set it to null"
    )


class GraderConfig(BaseModel):
    """Time limits and the judge process's settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    per_test_timeout_s: float = Field(3.0, gt=0, description="Wall-clock limit of each hidden test.")
    total_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Wall-clock budget of one grading's tests together, from the first test's start (HumanEval's "
        "harness has one limit per check program); tests left when it is spent fail as timed out without running. "
        "None: the per-test limit alone, so a draft that loops costs every test its full limit.",
    )
    load_timeout_s: float | None = Field(
        None, gt=0, description="Limit of loading the solution (its module-level code); None: per_test_timeout_s."
    )
    judge_grace_s: float = Field(
        2.0, gt=0, description="Extra time the judge's own code gets past a test's limit before it is killed."
    )
    judge_python: str = Field(
        "python3", description="Interpreter of the judge (stdlib only), looked up on /usr/local/bin:/usr/bin:/bin."
    )
    judge_uid: int = Field(
        65533, ge=1, description="Unprivileged uid the judge drops to when started as root (not the sandbox's)."
    )
    judge_memory_bytes: int = Field(2048 * MiB, ge=256 * MiB, description="Address-space limit of the judge.")
    require_host_isolation: bool = Field(
        True,
        description="Refuse to grade in a sandbox whose code can act as the trainer's uid (a process sandbox of a "
        "trainer not started as root): it could write verdicts into the trainer's pipes, read the judge's inputs "
        "and the trainer's files. False only for trusted solutions (development on a machine without Docker).",
    )

    @model_validator(mode="after")
    def _budget_holds_a_test(self) -> GraderConfig:
        problem = budget_problem(self.per_test_timeout_s, self.total_timeout_s, "per_test_timeout_s", "total_timeout_s")
        if problem is not None:
            raise ValueError(problem)
        return self

    @property
    def load_s(self) -> float:
        """The effective load limit."""
        return self.load_timeout_s or self.per_test_timeout_s


def build_program(task: GradableTask, solution: str) -> str:
    """The code under test: the task's prefix followed by the solution (HumanEval's prompt + completion)."""
    prefix = task.code_prefix
    if prefix and not prefix.endswith("\n") and not solution.startswith("\n"):
        prefix += "\n"
    return prefix + solution


class Grader:
    """Grades solutions across the trust boundary; owns a judge process (close it, or use ``with``)."""

    def __init__(self, config: GraderConfig | None = None) -> None:
        self.config = config or GraderConfig()
        self._judge = JudgeProcess(self.config.judge_python, self.config.judge_uid, self.config.judge_memory_bytes)

    def grade(self, sandbox: Any, task: GradableTask, solution: str) -> GradeResult:
        """Per-test verdicts and hack flags for ``solution`` against ``task.tests`` (run in ``sandbox``).

        Raises only for what no solution can cause and a person must fix (UnsafeSandboxError, a task prefix
        that fails in the judge, a judge that cannot start); any other failure is a flagged, scored 0.
        """
        if self.config.require_host_isolation:
            require_isolation(sandbox)
        start = time.monotonic()
        try:
            return _GradingRun(self.config, sandbox, task, solution).execute(self._judge)
        except GradingSetupError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever broke, the episode is scored (0, flagged), not dropped
            log.warning("grading failed, scored 0 and flagged: %s: %s", type(exc).__name__, exc, exc_info=True)
            self._judge.close()  # its stream may be mid-job: the next grading starts a fresh one
            reason = f"{type(exc).__name__}: {exc}"[:300]
            flag = HackFlag(kind="grading_error", detail=reason, source="host")
            verdicts = [
                TestVerdict(index=i, passed=False, error=f"grading failed: {reason}") for i in range(len(task.tests))
            ]
            return GradeResult(verdicts=verdicts, flags=[flag], duration_s=time.monotonic() - start)

    def close(self) -> None:
        """Stop the judge process (idempotent; a later ``grade`` starts a new one)."""
        self._judge.close()

    def __enter__(self) -> Grader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def grade(sandbox: Any, task: GradableTask, solution: str, *, per_test_timeout_s: float = 3.0) -> GradeResult:
    """One-off grading with a temporary judge (an env keeps a ``Grader`` instead, to reuse its judge)."""
    with Grader(GraderConfig(per_test_timeout_s=per_test_timeout_s)) as grader:
        return grader.grade(sandbox, task, solution)


class _GradingRun:
    """The state of one grading: the solution process, the verdicts so far, the flags."""

    def __init__(self, config: GraderConfig, sandbox: Any, task: GradableTask, solution: str) -> None:
        self.config, self.task = config, task
        program = build_program(task, solution)
        self.flags: list[HackFlag] = scan_source(solution, program)
        self.verdicts: dict[int, TestVerdict] = {}
        self.solution = SolutionProcess(
            sandbox,
            program,
            per_test_s=config.per_test_timeout_s,
            budget_s=config.total_timeout_s,
            load_timeout_s=config.load_s,
            flags=self.flags,
        )
        self.current: int | None = None

    def execute(self, judge: JudgeProcess) -> GradeResult:
        start = time.monotonic()
        load_error = "grading did not start"
        try:
            judge.start_job(self._job())  # the judge forks and runs the prefix while the solution loads
            load_error = self.solution.start()
            if load_error is None:
                self._judge_tests(judge)
        finally:
            judge.finish_job(abort=load_error is not None)
            self.solution.close()
        missing = "no verdict (the judge stopped)" if load_error is None else f"solution failed: {load_error}"
        verdicts = [
            self.verdicts.get(i, TestVerdict(index=i, passed=False, error=missing)) for i in range(len(self.task.tests))
        ]
        unique = list({(f.kind, f.detail): f for f in self.flags}.values())
        void = next((f for f in unique if f.kind in VOIDING_KINDS), None)
        if void is not None:  # no verdict of this grading can be trusted
            verdicts = [TestVerdict(index=v.index, passed=False, error=f"void: {void}"[:300]) for v in verdicts]
        return GradeResult(verdicts=verdicts, flags=unique, duration_s=time.monotonic() - start)

    @property
    def alarm_s(self) -> float:
        """The judge's own per-test backstop (the relay times the solution's calls exactly)."""
        return self.config.per_test_timeout_s + self.config.load_s + 0.5

    def _job(self) -> dict[str, Any]:
        return {
            "prefix": self.task.code_prefix,
            "tests": list(self.task.tests),
            "entry_point": self.task.entry_point,
            "alarm_s": self.alarm_s,
            "cpu_s": len(self.task.tests) * self.alarm_s + 10,
        }

    def _judge_tests(self, judge: JudgeProcess) -> None:
        slack = self.alarm_s - self.config.per_test_timeout_s + self.config.judge_grace_s
        deadline = time.monotonic() + 10.0 + self.config.load_s  # a fresh zygote starts, the prefix runs
        try:
            while self._relay(judge, judge.receive(deadline)):
                deadline = max(self.solution.deadline, time.monotonic()) + slack
        except JudgeTimeout:
            judge.kill_child()
            if self.current is not None and self.current not in self.verdicts:
                self._verdict(self.current, "the test ran past its time limit (the judge was stopped)", True)
        except JudgeLost as exc:  # the zygote died mid-job (it ends a job only with an `exit` frame after `done`)
            self.flags.append(HackFlag(kind="grading_error", detail=f"the judge was lost: {exc}"[:200], source="host"))
        except JudgeTampered as exc:
            judge.kill_child()
            judge.close()  # its stream cannot be trusted any more: the next grading starts a fresh judge
            self._tamper(f"judge channel: {exc}")

    def _tamper(self, detail: str) -> None:
        self.flags.append(HackFlag(kind="channel_tampering", detail=detail[:200], source="host"))

    def _relay(self, judge: JudgeProcess, message: dict[str, Any]) -> bool:
        """Act on one message of the judge; False when the job is over."""
        op = message.get("op")
        if op == "test":
            if message.get("index") != len(self.verdicts) or self.current not in (None, len(self.verdicts) - 1):
                raise JudgeTampered(f"test {message.get('index')!r} out of order")
            self.current = int(message["index"])
            self.solution.begin_test()
        elif op == "rpc":
            reply = self.solution.forward(message["request"])
            judge.send({"seq": message["seq"], "gen": self.solution.gen, **reply})
        elif op == "verdict":
            error = message.get("error")
            if message.get("index") != self.current or self.current in self.verdicts:
                raise JudgeTampered(f"a verdict for test {message.get('index')!r} while test {self.current} runs")
            self._verdict(int(message["index"]), error, bool(error) and error.startswith("TimeoutError"))
        elif op == "flag":
            self.flags.append(HackFlag(kind=message["kind"], detail=str(message["detail"]), source="host"))
        elif op == "done" and len(self.verdicts) != len(self.task.tests):
            raise JudgeTampered(f"done after {len(self.verdicts)} of {len(self.task.tests)} verdicts")
        elif op in ("crash", "exit"):  # the job's child ended before `done`: grading did not complete
            detail = f"the judge's child ended before its verdicts: {message.get('error', message.get('status'))}"
            self.flags.append(HackFlag(kind="grading_error", detail=detail[:200], source="host"))
        elif op == "prefix_error":
            raise GradingSetupError(
                f"the task's code_prefix fails in the judge ({message.get('error')}): it must run with the judge's "
                "python (stdlib only), like the tests"
            )
        return op not in ("done", "exit", "crash")

    def _verdict(self, index: int, error: str | None, timed_out: bool) -> None:
        if 0 <= index < len(self.task.tests):
            self.verdicts[index] = TestVerdict(index=index, passed=error is None, error=error, timed_out=timed_out)
