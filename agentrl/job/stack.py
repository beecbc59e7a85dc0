"""The rollout stack, built in one place: env factory, task dataset, engine, buffer and orchestrator.

``agentrl train``, ``agentrl rollout``, ``agentrl eval`` and the held-out evaluation inside training
all build what they sample with here, so a new engine backend, env option or buffer rule is wired
once. The engine comes from ``make_engine`` and is not looked into.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl.algos.credit import signal_filter
from agentrl.config.sections import RolloutConfig
from agentrl.engines.base import InferenceEngine
from agentrl.engines.factory import make_engine
from agentrl.env.registry import make_env_factory
from agentrl.errors import ConfigError
from agentrl.job.run_config import RunConfig
from agentrl.rollout.buffer import BUFFER_FILE, RolloutBuffer
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.orchestrator import RolloutOrchestrator
from agentrl.rollout.runner import EnvFactory
from agentrl.rollout.tracebacks import TracebackLog


def env_factory_for(cfg: RunConfig, split: str | None = None) -> EnvFactory:
    """The run's env factory (resolved and validated now); ``split`` overrides ``env.kwargs.split``."""
    env_cfg = cfg.env
    if split is not None:
        env_cfg = env_cfg.model_copy(update={"kwargs": {**env_cfg.kwargs, "split": split}})
    return make_env_factory(env_cfg)


def env_task_ids(env_factory: EnvFactory) -> list[str]:
    """The env's task ids ([] when it has no task set), from one probe env that is closed again."""
    probe = env_factory()
    try:
        return list(probe.task_ids())
    finally:
        probe.close()


def load_run_tokenizer(cfg: RunConfig) -> Any:
    """The tokenizer of ``model.path`` (the one the engine and the trainer use)."""
    from transformers import AutoTokenizer  # lazy: `agentrl --help` stays fast

    return AutoTokenizer.from_pretrained(cfg.model.path)


def build_engine(cfg: RunConfig) -> InferenceEngine:
    """The configured inference engine."""
    return make_engine(cfg.engine, cfg.model)


@dataclass
class RolloutStack:
    """What a collecting job samples with; ``close`` releases it in order (episodes, engine, buffer)."""

    env_factory: EnvFactory
    dataset: TaskDataset
    engine: InferenceEngine
    buffer: RolloutBuffer
    orchestrator: RolloutOrchestrator

    async def close(self) -> None:
        """Stop in-flight episodes and close envs, the engine and the buffer."""
        try:
            await self.orchestrator.close()
            await self.engine.close()
        finally:
            self.buffer.close()


def build_rollout_stack(
    cfg: RunConfig,
    run_dir: Path,
    tokenizer: Any,
    *,
    epochs: int | None = None,
    num_tasks: int | None = None,
    require_tasks: str | None = None,
    prepare_engine: Callable[[InferenceEngine], InferenceEngine] | None = None,
) -> RolloutStack:
    """Env factory, dataset (``epochs`` passes over ``num_tasks`` tasks), engine, ``run_dir``'s buffer, orchestrator.

    ``require_tasks``: when set, an env without task ids (an unbounded task stream) is a ConfigError
    whose fix is this text. ``prepare_engine`` checks or wraps the engine before the orchestrator uses it.
    An existing buffer is opened before the engine loads (a bad one fails fast); a new one after it,
    so a failing engine leaves no buffer behind to block a retry under the same run name.
    """
    env_factory = env_factory_for(cfg)
    probe = env_factory()
    try:
        probe.tool_schemas()  # a tool no JSON schema describes fails here, before the engine loads the model
        dataset = TaskDataset.from_env(
            probe, seed=cfg.rollout.seed, epochs=epochs, num_tasks=num_tasks, order=cfg.rollout.task_order
        )
    finally:
        probe.close()
    if require_tasks is not None and dataset.total is None:
        raise ConfigError(f"env {cfg.env.id!r} has no task ids; {require_tasks}")
    path = run_dir / BUFFER_FILE
    buffer = RolloutBuffer(path) if path.exists() else None
    try:
        engine = build_engine(cfg)
        if prepare_engine is not None:
            engine = prepare_engine(engine)
        buffer = buffer or RolloutBuffer(path)
        orchestrator = RolloutOrchestrator(
            engine,
            env_factory,
            tokenizer,
            cfg.rollout,
            dataset=dataset,
            buffer=buffer,
            group_filter=signal_filter(cfg.algorithm),
            step_timeout_s=cfg.env.step_timeout_s,
            tracebacks=TracebackLog(run_dir),
        )
    except BaseException:
        if buffer is not None:
            buffer.close()
        raise
    return RolloutStack(env_factory, dataset, engine, buffer, orchestrator)


@dataclass(frozen=True)
class EvalPlan:
    """What an evaluation runs: the env factory, its task ids (None: the env's own default) and rollout settings."""

    env_factory: EnvFactory
    task_ids: list[str] | None
    rollout: RolloutConfig


def eval_plan(
    cfg: RunConfig,
    *,
    samples: int,
    split: str | None = None,
    temperature: float | None = None,
    max_tasks: int | None = None,
) -> EvalPlan:
    """Evaluation episodes of ``split``'s first ``max_tasks`` tasks: no partial rollouts, ``samples`` per task."""
    env_factory = env_factory_for(cfg, split)
    task_ids = env_task_ids(env_factory)
    if max_tasks is not None:
        task_ids = task_ids[:max_tasks]
    # Evaluation never resumes episodes: each one runs to its end; a task's samples form one "group".
    update: dict[str, Any] = {"partial_rollout": False, "group_size": samples}
    if temperature is not None:
        update["temperature"] = temperature
    return EvalPlan(env_factory, task_ids or None, cfg.rollout.model_copy(update=update))
