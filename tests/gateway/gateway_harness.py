"""Running gateway episodes in-process: the embedded engine (the real one), the orchestrator, AgentGateway-v0."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from agentrl.config.sections import RolloutConfig
from agentrl.engines.embedded.engine import EmbeddedEngine
from agentrl.env import MultiTurnEnv
from agentrl.gateway.env import AgentGatewayEnv
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.orchestrator import RolloutOrchestrator
from agentrl.trainer.seeding import SeededEngine

ROLLOUT = {"group_size": 1, "prompts_per_step": 2, "partial_rollout": False, "max_new_tokens": 48}


def rollout_config(**overrides: Any) -> RolloutConfig:
    """A small rollout section (one episode per task unless overridden)."""
    return RolloutConfig(**{**ROLLOUT, "max_episode_tokens": 1500, **overrides})


@asynccontextmanager
async def orchestrator(
    model_dir: Path, env_factory: Any, rollout: RolloutConfig, seed: int | None = 0
) -> AsyncIterator[RolloutOrchestrator]:
    """An orchestrator on the embedded engine (requests seeded by content when ``seed`` is set); closed after."""
    from transformers import AutoTokenizer

    engine: Any = EmbeddedEngine.from_pretrained(model_dir)
    if seed is not None:
        engine = SeededEngine(engine, seed)
    probe: MultiTurnEnv = env_factory()
    dataset = TaskDataset.from_env(probe, seed=rollout.seed, epochs=1)
    probe.close()
    orch = RolloutOrchestrator(engine, env_factory, AutoTokenizer.from_pretrained(model_dir), rollout, dataset=dataset)
    try:
        yield orch
    finally:
        await orch.close()
        await engine.close()


def gateway(agent: Any, tasks: Any, **kwargs: Any) -> Any:
    """A factory of AgentGateway-v0 envs for ``agent`` on ``tasks``."""
    return lambda: AgentGatewayEnv(agent=agent, tasks=tasks, **kwargs)
