"""Code envs starting warm (JSON on stdout): a rollout's first step after an evaluation, with the evaluation's
sandboxes carried over through the shared pools (``shared``) and without (``no_carry``: the pools closed in
between, so every sandbox of the step starts cold, as each env's own did before the pools were shared).

Each phase runs one episode per env on its own thread, as the rollout's env pool does: reset, a wrong draft
(run in the session sandbox, checked on the visible examples in a grading sandbox), then the reference
solution (checked, then graded by the hidden tests). Forms alternate; equal work on both sides.

Usage: .venv/bin/python bench/bench_env_start.py [--config configs/quickstart.yaml] [--eval-envs 23]
       [--rollout-envs 36] [--rounds 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from agentrl.env.registry import make_env_factory
from agentrl.job.run_config import RunConfig
from sandboxes.shared import close_shared_pools, shared_pool


def episode(env: Any, index: int, task_ids: list[str]) -> float:
    """One scripted episode; returns its seconds in env calls."""
    started = time.perf_counter()
    env.reset(seed=index, options={"task_id": task_ids[index % len(task_ids)]})
    task = env.task
    env.step(f"```python\n{task.wrong[0] if task.wrong else task.solution}\n```\n")
    env.step(f"```python\n{task.solution}\n```\n")
    return time.perf_counter() - started


PURPOSES = (("session", False), ("grading", True))  # as envs/code_exec/session.py asks for them


def run_phase(envs: list[Any]) -> dict[str, float]:
    """Every env's episode at once; wall seconds, summed env seconds and sandboxes started meanwhile."""
    sandbox = envs[0].config.sandbox
    before = sum(shared_pool(sandbox, purpose, single_use=one).started for purpose, one in PURPOSES)
    task_ids = envs[0].task_ids()
    started = time.perf_counter()
    with ThreadPoolExecutor(len(envs)) as executor:
        env_s = list(executor.map(lambda i: episode(envs[i], i, task_ids), range(len(envs))))
    after = sum(shared_pool(sandbox, purpose, single_use=one).started for purpose, one in PURPOSES)
    return {"wall_s": time.perf_counter() - started, "env_s": sum(env_s), "sandboxes_started": after - before}


def one_round(factory: Any, form: str, eval_envs: int, rollout_envs: int) -> dict[str, dict[str, float]]:
    """An evaluation's phase, its envs closed, then a rollout's first and second step."""
    close_shared_pools()  # every round starts cold
    evaluation = [factory() for _ in range(eval_envs)]
    result = {"evaluation": run_phase(evaluation)}
    for env in evaluation:
        env.close()
    if form == "no_carry":
        close_shared_pools()
    rollout = [factory() for _ in range(rollout_envs)]
    result["rollout_step1"] = run_phase(rollout)
    result["rollout_step2"] = run_phase(rollout)
    for env in rollout:
        env.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/quickstart.yaml")
    parser.add_argument("--eval-envs", type=int, default=23)
    parser.add_argument("--rollout-envs", type=int, default=36)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    cfg = RunConfig.model_validate(yaml.safe_load(Path(args.config).read_text()))
    factory = make_env_factory(cfg.env)
    rounds: dict[str, list[dict[str, dict[str, float]]]] = {"shared": [], "no_carry": []}
    for _ in range(args.rounds):
        for form in rounds:
            rounds[form].append(one_round(factory, form, args.eval_envs, args.rollout_envs))
    close_shared_pools()
    median = lambda form, phase, key: statistics.median(r[phase][key] for r in rounds[form])  # noqa: E731
    summary = {
        form: {
            phase: {key: round(median(form, phase, key), 3) for key in ("wall_s", "env_s", "sandboxes_started")}
            for phase in ("evaluation", "rollout_step1", "rollout_step2")
        }
        for form in rounds
    }
    step1 = {
        key: summary["shared"]["rollout_step1"][key] / summary["no_carry"]["rollout_step1"][key]
        for key in ("wall_s", "env_s")
    }
    report = {
        "config": args.config,
        "eval_envs": args.eval_envs,
        "rollout_envs": args.rollout_envs,
        "rounds": args.rounds,
        "median": summary,
        "rollout_step1_shared_over_no_carry": {key: round(value, 3) for key, value in step1.items()},
        "raw": rounds,
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
