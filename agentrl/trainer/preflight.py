"""``agentrl train --dry-run``: check everything a run needs, in seconds, without training.

The config is already validated; this checks the world it points at: the model directory (tokenizer,
chat template, architecture), the engine (each SGLang server's health and logprob settings), and the
environment's external resources (e.g. a sandbox started from the Docker image) and one real turn of
it checked against the env contract. The first failure raises the component's own error, which names the fix.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import warnings
from collections.abc import Callable

from agentrl.env import MultiTurnEnv
from agentrl.errors import PreflightError
from agentrl.job.run_config import RunConfig
from agentrl.tools import ToolDocWarning


def check_model(cfg: RunConfig) -> list[str]:
    """The model directory holds weights, a tokenizer with a chat template, and a config transformers reads."""
    from transformers import AutoConfig

    from agentrl.models.loading import check_model_dir, load_tokenizer

    directory = check_model_dir(cfg.model.path)
    tokenizer = load_tokenizer(directory)
    arch = AutoConfig.from_pretrained(directory)
    return [f"model {directory}: {arch.model_type}, vocab {len(tokenizer)}, chat template present"]


async def check_engine(cfg: RunConfig) -> list[str]:
    """The engine backend's own preflight (SGLang: every server healthy with training-grade logprobs;
    embedded: device, model directory and worst-case key/value memory, without loading), and whether its logprobs
    can stand for the update's (``trainer.logprob_match``)."""
    from agentrl.trainer.logprob_match import behaviour_mismatch

    lines = await cfg.engine.preflight(cfg.model)
    mismatch = behaviour_mismatch(cfg, await cfg.engine.served_dtype(cfg.model))
    return [*lines, mismatch] if mismatch else lines


def check_precision(cfg: RunConfig) -> list[str]:
    """What ``model.dtype`` and ``trainer.precision`` resolve to on this machine, and what that costs the update."""
    from agentrl.models.loading import resolve_device, resolve_dtype
    from agentrl.models.precision import describe_bf16
    from agentrl.trainer.eval_engine import needs_float32_twin
    from agentrl.trainer.update import autocast_bf16

    device = resolve_device(cfg.model.device)
    engine_dtype = str(resolve_dtype(cfg.model.dtype, device)).removeprefix("torch.")
    update = "bf16 autocast" if autocast_bf16(cfg.trainer.precision, device.split(":")[0]) else "float32"
    line = f"precision: engine {engine_dtype}, update {update}, master weights float32 ({describe_bf16(device)})"
    exact = cfg.engine.samples_like_an_fp32_trainer(cfg.model) and update == "float32"
    if cfg.algorithm.off_policy.proximal == "recompute_stale" and not exact:
        line += "; proximal recompute_stale recomputes every trained row (the engine's logprobs are not the update's)"
    if cfg.eval.splits and cfg.eval.precision == "float32":
        where = "a float32 twin of the engine" if needs_float32_twin(cfg) else "the engine (already float32)"
        line += f"; held-out evaluation in {where} (eval.precision float32)"
    return [line]


def check_tools(env: MultiTurnEnv, env_id: str) -> list[str]:
    """Build the schemas of ``env``'s tools as a run would, then close it.

    A type no schema describes raises a one-line ConfigError naming the tool and parameter; a
    docstring ``Args:`` entry naming no parameter becomes a ``warning:`` line.
    """
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ToolDocWarning)
            schemas = env.tool_schemas()
    finally:
        env.close()
    names = ", ".join(s.get("function", {}).get("name", "?") for s in schemas)
    lines = [f"warning: {w.message}" for w in caught if issubclass(w.category, ToolDocWarning)]
    return [f"env {env_id}: tool schemas built ({names})" if schemas else f"env {env_id}: no tools", *lines]


def check_env(cfg: RunConfig) -> list[str]:
    """Build one environment, let it check its own resources (``MultiTurnEnv.preflight``), then run one real turn.

    The turn (reset on the first task, one step with a canned reply) is checked against the env
    contract, so an env that raises or returns the wrong shape fails the dry run, not the job.
    """
    from agentrl.env.contract import probe_turn
    from agentrl.job.stack import env_factory_for
    from agentrl.rollout.dataset import task_seed

    env = env_factory_for(cfg)()
    try:
        lines = check_tools(env_factory_for(cfg)(), cfg.env.id)
        lines += env.preflight()
        tasks = env.task_ids()
        first = tasks[0] if tasks else "0"  # the dataset's ids for an env without a task set
        turn = _bounded(lambda: probe_turn(env, first, task_seed(first)), cfg)
    finally:
        env.close()
    return [f"env {cfg.env.id}: {len(tasks) or 'seeded'} tasks", *lines, f"env {cfg.env.id}: {turn}"]


PROBE_LIMIT_S = 60.0  # the dry run's bound on its one probe turn when env.step_timeout_s sets none


def _bounded(probe: Callable[[], str], cfg: RunConfig) -> str:
    """``probe()`` on a daemon thread; PreflightError when it does not return in time (a blocking env)."""
    from agentrl.rollout.env_threads import DaemonThreadPool

    limit = cfg.env.step_timeout_s or PROBE_LIMIT_S
    with DaemonThreadPool(1, thread_name_prefix="agentrl-preflight") as pool:
        try:
            return pool.submit(probe).result(timeout=limit)
        except concurrent.futures.TimeoutError:
            raise PreflightError(
                f"env {cfg.env.id}: one turn (reset, then one step) did not return within {limit:g} s; a training "
                "step would hang the same way. Find what reset/step waits on (input(), a lock, a service), or set "
                "env.step_timeout_s above what one call needs"
            ) from None


def preflight(cfg: RunConfig) -> list[str]:
    """Run every check; returns the lines to print (raises on the first failure)."""
    from agentrl.trainer.dry_run_checks import check_eval_splits, clip_risk_warnings

    checks = [*check_model(cfg), *check_precision(cfg), *asyncio.run(check_engine(cfg)), *check_env(cfg)]
    return [*checks, *check_eval_splits(cfg), *clip_risk_warnings(cfg)]
