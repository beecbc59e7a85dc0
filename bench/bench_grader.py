"""Grading cost: the trust-boundary grader vs the old in-process harness, side by side in one run (JSON on stdout).

Per task set (the bundled easy tasks' reference solutions, HumanEval's canonical solutions) it measures

* latency: one sandbox, each task graded by the old harness and by the new grader in turn (interleaved,
  so both see the same machine load): p50/p90 ms and the ratio new/old;
* throughput: a SandboxPool of ``--pool`` sandboxes and as many threads, each thread with its own Grader
  (as each env has one): tasks graded per second, old and new alternating in ``--rounds`` rounds.

* step cost (``--reuse``): what one grading costs the env step that asks for it, a pooled sandbox reset after
  each grading (``reused``, as before grading sandboxes were single-use) against a single-use pool that removes
  each sandbox and starts a fresh one in the background (``single_use``): acquire + grade + release, interleaved
  per task, p50/p90 ms and the ratio; plus each mode alone, gradings back to back, until its background work is
  done (``wall_per_task_ms``: the machine's whole cost per grading, background starts included).

Both graders must pass every reference solution (``agree`` counts it), and on HumanEval a known-wrong
completion of every task (a body that returns None) must fail under both (``wrong_failed``). Usage:
    .venv/bin/python bench/bench_grader.py [--backend docker|process] [--pool 4] [--easy 72] [--humaneval 164]
        [--reuse] [--reuse-only] [--gap-s 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from legacy_grader import legacy_grade  # the old harness lives beside this script

from envs.code_exec.grading import Grader, GraderConfig, build_program
from envs.code_exec.session import _warm_for_grading
from envs.code_exec.tasks import CodingTask, load_tasks
from sandboxes import SandboxPool, docker_available, make_sandbox, parse_sandbox_config

Grade = Callable[[Any, CodingTask], bool]


def solution_of(task: CodingTask) -> str:
    return "\n" + (task.solution or "") if task.kind != "humaneval" else (task.solution or "")


def old_grade(sandbox: Any, task: CodingTask) -> bool:
    return all(legacy_grade(sandbox, build_program(task, solution_of(task)), task.tests))


class NewGrade:
    """The new grader, one Grader per thread (each env owns one)."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.graders: list[Grader] = []

    def __call__(self, sandbox: Any, task: CodingTask) -> bool:
        grader = getattr(self.local, "grader", None)
        if grader is None:
            grader = self.local.grader = Grader(GraderConfig())
            self.graders.append(grader)
        return grader.grade(sandbox, task, solution_of(task)).success

    def close(self) -> None:
        for grader in self.graders:
            grader.close()


def percentiles(values_s: list[float]) -> dict[str, float]:
    ordered = sorted(values_s)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return {
        "p50_ms": round(pick(0.5), 2),
        "p90_ms": round(pick(0.9), 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
    }


def latency(config: Any, tasks: list[CodingTask], graders: dict[str, Grade]) -> dict[str, Any]:
    times: dict[str, list[float]] = {name: [] for name in graders}
    passed: dict[str, int] = dict.fromkeys(graders, 0)
    with make_sandbox(config) as sandbox:
        for grade in graders.values():  # warm-up: the judge process starts, caches fill
            grade(sandbox, tasks[0])
        for task in tasks:
            for name, grade in graders.items():
                start = time.perf_counter()
                passed[name] += grade(sandbox, task)
                times[name].append(time.perf_counter() - start)
    out: dict[str, Any] = {name: {**percentiles(times[name]), "passed": passed[name]} for name in graders}
    out["new_over_old_p50"] = round(out["new"]["p50_ms"] / out["old"]["p50_ms"], 2)
    out["new_over_old_p90"] = round(out["new"]["p90_ms"] / out["old"]["p90_ms"], 2)
    return out


def wrong_failed(config: Any, tasks: list[CodingTask], graders: dict[str, Grade]) -> dict[str, int]:
    """How many tasks' known-wrong completion (``return None``) each grader fails (all of them, when exact)."""
    wrong = [task.model_copy(update={"solution": "    return None\n"}) for task in tasks]
    with make_sandbox(config) as sandbox:
        return {name: sum(not grade(sandbox, task) for task in wrong) for name, grade in graders.items()}


def throughput(pool: SandboxPool, tasks: list[CodingTask], grade: Grade) -> float:
    def one(task: CodingTask) -> bool:
        with pool.session() as sandbox:
            return grade(sandbox, task)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=pool.size) as executor:
        list(executor.map(one, tasks))
    return len(tasks) / (time.perf_counter() - start)


def throughputs(config: Any, size: int, tasks: list[CodingTask], graders: dict[str, Grade], rounds: int) -> dict:
    rates: dict[str, list[float]] = {name: [] for name in graders}
    with SandboxPool(config, size) as pool:
        for grade in graders.values():
            throughput(pool, tasks[: size * 2], grade)  # warm-up: each thread's judge starts
        for _ in range(rounds):
            for name, grade in graders.items():
                rates[name].append(throughput(pool, tasks, grade))
    out: dict[str, Any] = {f"{name}_tasks_per_s": round(statistics.median(r), 1) for name, r in rates.items()}
    out["new_over_old"] = round(out["new_tasks_per_s"] / out["old_tasks_per_s"], 2)
    return out


def _timed_grading(pool: SandboxPool, grade: Grade, task: CodingTask) -> float:
    start = time.perf_counter()
    sandbox = pool.acquire(timeout_s=300)
    try:
        grade(sandbox, task)
    finally:
        pool.release(sandbox)
    return time.perf_counter() - start


def _quiet(pool: SandboxPool) -> None:
    """Wait until the pool's background starts are done (the next grading would find a fresh sandbox)."""
    while pool._refilling:
        time.sleep(0.005)


def step_cost(config: Any, tasks: list[CodingTask], grade: Grade, gap_s: float = 0.0) -> dict[str, Any]:
    """One grading as an env step pays for it: reused (reset on release) vs single-use (fresh per grading);
    ``gap_s`` seconds pass between two gradings of a pool (the model generating meanwhile), not counted."""
    single = SandboxPool(config, 1, single_use=True, prepare=_warm_for_grading)  # as the code envs' grading pool
    pools = {"reused": SandboxPool(config, 1), "single_use": single}
    times: dict[str, list[float]] = {name: [] for name in pools}
    walls: dict[str, float] = {}
    try:
        for pool in pools.values():  # warm-up: the judge starts, the first fresh sandbox is started
            _timed_grading(pool, grade, tasks[0])
            _quiet(pool)
        for task in tasks:
            for name, pool in pools.items():
                times[name].append(_timed_grading(pool, grade, task))
            time.sleep(gap_s)
        for name, pool in pools.items():
            _quiet(pool)
            start = time.perf_counter()
            for task in tasks:
                _timed_grading(pool, grade, task)
            _quiet(pool)
            walls[name] = (time.perf_counter() - start) / len(tasks)
    finally:
        for pool in pools.values():
            pool.close()
    out: dict[str, Any] = {
        name: {**percentiles(times[name]), "wall_per_task_ms": round(walls[name] * 1000, 2)} for name in pools
    }
    out["single_use_over_reused_p50"] = round(out["single_use"]["p50_ms"] / out["reused"]["p50_ms"], 2)
    out["single_use_over_reused_wall"] = round(walls["single_use"] / walls["reused"], 2)
    out["gap_s"] = gap_s
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("docker", "process"), default=None, help="Default: docker if usable.")
    parser.add_argument("--pool", type=int, default=4, help="Sandboxes (and threads) of the throughput test.")
    parser.add_argument("--easy", type=int, default=72, help="How many bundled easy tasks (max 72).")
    parser.add_argument("--humaneval", type=int, default=164, help="How many HumanEval tasks (max 164).")
    parser.add_argument("--rounds", type=int, default=3, help="Throughput rounds per grader (median reported).")
    parser.add_argument("--reuse", action="store_true", help="Also measure reused vs single-use grading sandboxes.")
    parser.add_argument("--reuse-only", action="store_true", help="Only that (no old harness, no throughput).")
    parser.add_argument("--gap-s", type=float, default=0.0, help="Seconds between two gradings in that measure.")
    args = parser.parse_args()
    warnings.simplefilter("ignore", RuntimeWarning)  # the process backend's isolation warning
    backend = args.backend or ("docker" if docker_available() else "process")
    config = parse_sandbox_config({"kind": backend})
    sets = {"easy": load_tasks("easy")[: args.easy], "humaneval": load_tasks("humaneval")[: args.humaneval]}
    new = NewGrade()
    graders: dict[str, Grade] = {"old": old_grade, "new": new}
    report: dict[str, Any] = {"backend": backend, "pool": args.pool}
    try:
        if args.reuse or args.reuse_only:
            report["step_cost"] = {name: step_cost(config, tasks, new, args.gap_s) for name, tasks in sets.items()}
        if args.reuse_only:
            print(json.dumps(report, indent=2))
            return
        for name, tasks in sets.items():
            report[name] = {
                "tasks": len(tasks),
                "latency": latency(config, tasks, graders),
                "throughput": throughputs(config, args.pool, tasks, graders, args.rounds),
            }
            report[name]["agree"] = report[name]["latency"]["old"]["passed"] == report[name]["latency"]["new"]["passed"]
        report["humaneval"]["wrong_failed"] = wrong_failed(config, sets["humaneval"], graders)
    finally:
        new.close()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
