"""``agentrl train --dry-run``: check everything a run needs, in seconds, without training.

The config is already validated; this checks the world it points at: the model directory (tokenizer,
chat template, architecture), the engine (each SGLang server's health and logprob settings), and the
environment's external resources (e.g. a sandbox started from the Docker image). The first failure
raises the component's own error, which names the fix.
"""

from __future__ import annotations

import asyncio

from agentrl.config.run import RunConfig
from agentrl.errors import EngineError


def check_model(cfg: RunConfig) -> list[str]:
    """The model directory holds weights, a tokenizer with a chat template, and a config transformers reads."""
    from transformers import AutoConfig

    from agentrl.models.loading import check_model_dir, load_tokenizer

    directory = check_model_dir(cfg.model.path)
    tokenizer = load_tokenizer(directory)
    arch = AutoConfig.from_pretrained(directory)
    return [f"model {directory}: {arch.model_type}, vocab {len(tokenizer)}, chat template present"]


async def check_engine(cfg: RunConfig) -> list[str]:
    """SGLang: every server (and every worker behind a router) is healthy, its settings and weight version are
    training-grade; what HTTP cannot show is said, not passed silently. Embedded: loads at start."""
    if cfg.engine.kind == "embedded":
        return [f"engine embedded (loads {cfg.model.path} in process on {cfg.model.device})"]
    from agentrl.engines.sglang_http import SGLangEngine

    engine = SGLangEngine(cfg.engine)
    try:
        if not await engine.health():
            raise EngineError(
                f"SGLang servers {cfg.engine.urls} are not all healthy (GET /health != 200); start them with "
                "scripts/launch_sglang.sh and retry"
            )
        return await engine.probe()
    finally:
        await engine.close()


def check_env(cfg: RunConfig) -> list[str]:
    """Build one environment and let it check its own resources (``MultiTurnEnv.preflight``)."""
    from agentrl.registry import make_env_factory

    env = make_env_factory(cfg.env)()
    try:
        lines = env.preflight()
        tasks = env.task_ids()
    finally:
        env.close()
    return [f"env {cfg.env.id}: {len(tasks) or 'seeded'} tasks", *lines]


def preflight(cfg: RunConfig) -> list[str]:
    """Run every check; returns the lines to print (raises on the first failure)."""
    return [*check_model(cfg), *asyncio.run(check_engine(cfg)), *check_env(cfg)]
