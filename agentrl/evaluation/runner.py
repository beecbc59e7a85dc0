"""Evaluation: pass@k with the unbiased estimator (Chen et al. 2021, eq. 1) over an env's task set.

Each task is sampled ``samples`` times through the same episode loop training uses
(``EpisodeRunner``); an episode succeeds as ``Episode.success`` says (its last step's info
``success``, else a final reward of 1). Envs are created once per concurrent slot and reused across tasks.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.chat import ChatAssembler
from agentrl.config.sections import RolloutConfig
from agentrl.engines.base import InferenceEngine
from agentrl.env import MultiTurnEnv
from agentrl.errors import ConfigError
from agentrl.evaluation.behaviour import behaviour_metrics, had_failed_run
from agentrl.rollout.dataset import task_seed
from agentrl.rollout.env_threads import DaemonThreadPool
from agentrl.rollout.metrics import RolloutMetrics
from agentrl.rollout.runner import EpisodeRunner, RunContext, make_episode
from agentrl.trajectory import Episode


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct: 1 - C(n-c, k) / C(n, k)."""
    if not 0 <= c <= n or k < 1 or k > n:
        raise ConfigError(
            f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}; draw at least k samples per task"
        )
    if n - c < k:
        return 1.0
    # The product form avoids huge binomials (Chen et al. 2021, Figure 3).
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


@dataclass
class TaskResult:
    """All samples of one task: success flags, rewards, whether each had a failed run (with success: a recovery;
    ``agentrl.evaluation.behaviour``), and the failures' error texts."""

    task_id: str
    successes: list[bool] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failed_runs: list[bool] = field(default_factory=list)


@dataclass
class EvalReport:
    """pass@k per k, mean reward and per-task outcomes of one evaluation."""

    samples: int
    pass_at_k: dict[str, float]
    mean_reward: float
    num_tasks: int
    failed_episodes: int
    tokens_generated: int
    duration_s: float
    tasks: list[TaskResult]
    behaviour: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        """One line: pass@k values, mean reward, task count and time (plus turns used when multi-turn)."""
        passes = "  ".join(f"pass@{k} {v:.3f}" for k, v in self.pass_at_k.items())
        turns = f"  turns {self.behaviour['turns_mean']:.2f}" if self.behaviour.get("turns_mean", 1.0) > 1.0 else ""
        return (
            f"{passes}  mean reward {self.mean_reward:.3f}{turns}  ({self.num_tasks} tasks x {self.samples} samples, "
            f"{self.duration_s:.0f} s)"
        )

    def write_json(self, path: str | Path) -> None:
        """Write the report (per-task results included) as JSON."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")


def summarize(
    results: Sequence[TaskResult],
    ks: Sequence[int],
    samples: int,
    *,
    tokens: int = 0,
    duration_s: float = 0.0,
    behaviour: dict[str, float] | None = None,
) -> EvalReport:
    """Average unbiased pass@k over tasks (each task has ``samples`` samples); ``behaviour`` is passed through."""
    bad = [k for k in ks if k > samples]
    if bad:
        raise ConfigError(
            f"pass@{bad[0]} needs at least {bad[0]} samples per task, got samples={samples}; raise --samples or lower "
            "--k"
        )
    scores = {
        str(k): float(np.mean([pass_at_k(len(r.successes), sum(r.successes), k) for r in results])) if results else 0.0
        for k in ks
    }
    rewards = [x for r in results for x in r.rewards]
    return EvalReport(
        samples=samples,
        pass_at_k=scores,
        mean_reward=float(np.mean(rewards)) if rewards else 0.0,
        num_tasks=len(results),
        failed_episodes=sum(len(r.errors) for r in results),
        tokens_generated=tokens,
        duration_s=duration_s,
        tasks=list(results),
        behaviour=dict(behaviour or {}),
    )


async def _run_one(ctx: RunContext, envs: asyncio.Queue[MultiTurnEnv], task_id: str, index: int) -> Episode:
    env = await envs.get()
    try:
        episode = make_episode(
            f"eval-{task_id}-{index}", task_id, f"eval-{task_id}", task_seed(task_id), "", ctx.engine.weight_version
        )
        return await EpisodeRunner(episode, env, ctx).run()
    finally:
        envs.put_nowait(env)


async def evaluate(
    engine: InferenceEngine,
    env_factory: Callable[[], MultiTurnEnv],
    tokenizer: Any,
    config: RolloutConfig,
    *,
    samples: int = 1,
    ks: Sequence[int] = (1,),
    task_ids: Sequence[str] | None = None,
    concurrency: int = 16,
    on_episode: Callable[[Episode], None] | None = None,
) -> EvalReport:
    """pass@k of ``engine`` over ``task_ids`` (default: the env's task set), ``samples`` episodes per task."""
    started = time.perf_counter()
    first = env_factory()
    ids = list(task_ids) if task_ids is not None else first.task_ids() or [str(i) for i in range(16)]
    slots = max(1, min(concurrency, len(ids) * samples))
    envs: asyncio.Queue[MultiTurnEnv] = asyncio.Queue()
    envs.put_nowait(first)
    for _ in range(slots - 1):
        envs.put_nowait(env_factory())
    assembler = ChatAssembler(tokenizer, tools=first.tool_schemas() or None, template_mismatch=config.template_mismatch)
    metrics = RolloutMetrics()
    results = {task_id: TaskResult(task_id) for task_id in ids}
    finished: list[Episode] = []
    with DaemonThreadPool(slots, thread_name_prefix="agentrl-eval") as executor:  # a stuck env never blocks the exit
        ctx = RunContext(engine=engine, config=config, assembler=assembler, executor=executor, metrics=metrics)
        jobs = [_run_one(ctx, envs, task_id, i) for task_id in ids for i in range(samples)]
        try:
            for done in asyncio.as_completed(jobs):
                episode = await done
                result = results[episode.task_id]
                result.successes.append(episode.success)
                result.failed_runs.append(had_failed_run(episode))
                result.rewards.append(float(episode.final_reward or 0.0))
                if episode.error:
                    result.errors.append(episode.error)
                finished.append(episode)
                if on_episode is not None:
                    on_episode(episode)
        finally:
            while not envs.empty():
                envs.get_nowait().close()
    return summarize(
        list(results.values()),
        ks,
        samples,
        tokens=metrics.tokens_generated,
        duration_s=time.perf_counter() - started,
        behaviour=behaviour_metrics(finished),
    )
