"""The RL training loop: rollouts -> advantages -> update -> weight sync -> commit + checkpoint -> log.

Invariant: a step's rollout-buffer commit and its checkpoint describe the same boundary (the
checkpoint holds a copy of the buffer taken after the commit), so ``--resume`` continues exactly.
Under torchrun, rank 0 owns the engine and the rollouts and broadcasts each batch to every rank.
Ctrl-C/SIGTERM end the loop at the next step boundary, with a checkpoint (``interrupt.py``).
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.engines.transport import SharedStorageTransport, WeightTransport
from agentrl.errors import CheckpointError
from agentrl.job.run_config import RunConfig
from agentrl.job.rundir import new_run_dir
from agentrl.job.stack import build_rollout_stack, env_factory_for, load_run_tokenizer
from agentrl.models.loading import set_activation_checkpointing
from agentrl.trainer.async_loop import engine_threads, run_async_loop, threads_for
from agentrl.trainer.batch import build_rows
from agentrl.trainer.boundary import StepBoundaries
from agentrl.trainer.checkpoint import (
    latest_checkpoint,
    load_training_state,
    require_room_for_checkpoints,
    restore_buffer,
    set_rng_state,
)
from agentrl.trainer.distributed import (
    DistInfo,
    close_distributed,
    decoder_layers_of,
    init_distributed,
    shard_policy,
)
from agentrl.trainer.eval_engine import evaluation_engine
from agentrl.trainer.heldout import heldout_eval, summary_lines
from agentrl.trainer.interrupt import StopSignals, TrainingStopped
from agentrl.trainer.logprob_match import behaviour_mismatch
from agentrl.trainer.logprobs import PolicyLogprobs
from agentrl.trainer.preflight import check_tools
from agentrl.trainer.reporting import RunReporter
from agentrl.trainer.resume import resume_command, save_resolved_config
from agentrl.trainer.run_end import after_eval_pending, finished_run_note, stopped_in_last_step_note
from agentrl.trainer.seeding import SeededEngine
from agentrl.trainer.step_end import StepOutcome, end_step
from agentrl.trainer.sync import session_transport, sync_weights
from agentrl.trainer.update import PolicyUpdater
from agentrl.trainer.validate import check_engine_logprobs, check_resume, validate_run_config, write_run_meta
from agentrl.util.heap import trim_heap


@dataclass
class Session:
    """Everything a running training job holds."""

    cfg: RunConfig
    run_dir: Path
    dist: DistInfo
    lm: torch.nn.Module
    tokenizer: Any
    updater: PolicyUpdater
    engine: Any
    orchestrator: Any
    reporter: RunReporter
    start_step: int
    transport: WeightTransport  # how new weights reach the engine (trainer/sync.py: session_transport)
    cores: int | None = None  # threads an async update may widen to once the engine is idle (None: never)


def make_run_dir(cfg: RunConfig, config_name: str, resume: str | Path | None) -> Path:
    """The run directory: ``--resume`` names it (a run of the same model); else a new one
    (``agentrl.job.rundir``)."""
    if resume is not None:
        run_dir = Path(resume)
        check_resume(run_dir, cfg)
        return run_dir
    return new_run_dir(cfg.logging, config_name)


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed python, numpy and torch; deterministic mode also makes torch pick deterministic kernels."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def _device(cfg: RunConfig) -> torch.device:
    wanted = cfg.model.device
    return torch.device("cuda" if wanted == "cuda" or (wanted == "auto" and torch.cuda.is_available()) else "cpu")


def _load_policy(cfg: RunConfig, model_dir: Path | str, dist: DistInfo) -> tuple[torch.nn.Module, PolicyLogprobs]:
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(_device(cfg))  # fp32 master weights
    if cfg.trainer.gradient_checkpointing:
        set_activation_checkpointing(lm, True)
    lm.config.use_cache = False
    lm.train()
    policy = PolicyLogprobs(lm, cfg.trainer.logprob_chunk_tokens)
    if dist.enabled:
        shard_policy(policy, decoder_layers_of(lm))
    return lm, policy


async def build_session(cfg: RunConfig, run_dir: Path, dist: DistInfo, resume: bool) -> Session:
    """Validate, then load model, engine, env, dataset, buffer, orchestrator and reporter."""
    seed_everything(cfg.trainer.seed, cfg.trainer.deterministic)
    ckpt = latest_checkpoint(run_dir) if resume else None
    if resume and ckpt is None:
        raise CheckpointError(f"--resume {str(run_dir)!r} has no checkpoint yet; start a new run instead")
    if dist.is_main and ckpt is not None:
        restore_buffer(ckpt, run_dir)
    if dist.is_main and ckpt is None:
        write_run_meta(run_dir, cfg)
    if dist.is_main:  # what a bare --resume continues with (after an accepted change: the new config)
        save_resolved_config(run_dir, cfg)
    if dist.is_main:  # a tool no JSON schema describes fails now, not after the model has loaded
        check_tools(env_factory_for(cfg)(), cfg.env.id)
    tokenizer = load_run_tokenizer(cfg)
    lm, policy = _load_policy(cfg, ckpt.model_dir if ckpt else cfg.model.path, dist)
    if dist.is_main:  # a disk too small for the checkpoints fails now, not at the first checkpoint
        require_room_for_checkpoints(run_dir, lm, cfg.trainer.keep_checkpoints)
    updater = PolicyUpdater(
        policy,
        cfg.algorithm,
        cfg.trainer,
        temperature=cfg.rollout.temperature,
        total_steps=cfg.trainer.steps,
        dist=dist,
        engine_matches_fp32=await _engine_matches_fp32(cfg, dist),
    )
    start = 0
    if ckpt is not None:
        state = load_training_state(ckpt, dist)
        updater.optimizer.load_state_dict(state["optimizer"])
        updater.scheduler.load_state_dict(state["scheduler"])
        set_rng_state(state["rng"])
        start = ckpt.step
    engine = orchestrator = None
    if dist.is_main:
        engine, orchestrator = _rollout_side(cfg, run_dir, tokenizer)
    transport = session_transport(cfg, run_dir, dist)
    # An in-process engine loaded the base weights: bring it to a resumed checkpoint's policy. A shared-storage
    # transport also shares at once, so the first rollout does not hold the model twice. A server keeps what an
    # earlier run left on it, so a fresh run pushes its start weights too (else it samples another policy).
    if start or isinstance(transport, SharedStorageTransport) or cfg.engine.outlives_the_run():
        await sync_weights(engine, lm, start, transport=transport, dist=dist)
    reporter = RunReporter(
        run_dir,
        cfg.logging,
        cfg.trainer.steps,
        config=cfg.model_dump(mode="json"),
        start_step=start,
        enabled=dist.is_main,
    )
    return Session(cfg, run_dir, dist, lm, tokenizer, updater, engine, orchestrator, reporter, start, transport)


async def _engine_matches_fp32(cfg: RunConfig, dist: DistInfo) -> bool:
    """Whether the engine's logprobs are an fp32 trainer's: a server's dtype is read from it (set where it was
    launched; unknown counts as not), an in-process engine's follows model.dtype. Says so when GSPO would take
    mismatched logprobs as its old policy."""
    if not cfg.engine.outlives_the_run():
        return cfg.engine.samples_like_an_fp32_trainer(cfg.model)
    served = await cfg.engine.served_dtype(cfg.model) if dist.is_main else None
    warning = behaviour_mismatch(cfg, served) if dist.is_main else None
    if warning:
        print(f"[train] {warning}", file=sys.stderr, flush=True)
    return bool(_broadcast(served == "float32", dist))


def _rollout_side(cfg: RunConfig, run_dir: Path, tokenizer: Any) -> tuple[Any, Any]:
    def prepare(engine: Any) -> Any:
        check_engine_logprobs(engine.semantics, cfg)
        if cfg.trainer.deterministic:  # engine RNG state is not checkpointable: seed each request by its content
            return SeededEngine(engine, cfg.trainer.seed)
        return engine

    stack = build_rollout_stack(cfg, run_dir, tokenizer, prepare_engine=prepare)
    return stack.engine, stack.orchestrator


def _broadcast(obj: Any, dist: DistInfo) -> Any:
    if not dist.enabled:
        return obj
    import torch.distributed as tdist

    box = [obj]
    tdist.broadcast_object_list(box, src=0)
    return box[0]


async def run_loop(s: Session, boundaries: StepBoundaries | None = None) -> list[dict[str, Any]]:
    """The outer loop, one RL step per iteration; ``trainer.mode`` picks its shape.

    Each step is docs/design.md#data-flow-of-one-rl-step.
    """
    boundaries = boundaries or StepBoundaries(s.cfg.trainer, s.dist)
    if s.cfg.trainer.mode == "async":
        return await run_async_loop(s, boundaries)
    cfg, total = s.cfg, s.cfg.trainer.steps
    for step in range(s.start_step + 1, total + 1):
        started = time.perf_counter()
        if isinstance(s.engine, SeededEngine):
            s.engine.set_step(step)
        batch = await s.orchestrator.collect_step(step) if s.dist.is_main else None
        groups, rollout_metrics, exhausted = _broadcast(
            (batch.groups, batch.metrics, batch.exhausted) if batch is not None else None, s.dist
        )
        if not groups:
            break
        rows = build_rows(groups, cfg.rollout.group_size, cfg.algorithm, current_version=step - 1)
        await _release_engine_memory(s.engine)
        train_metrics = s.updater.update(rows, audit=cfg.algorithm.audit_due(step), version=step - 1)
        trim_heap()  # the update's freed activations back to the OS before the engine allocates again
        outcome = StepOutcome(step, groups, rollout_metrics, train_metrics, exhausted, started)
        if await end_step(s, outcome, boundaries):
            break
        if s.dist.is_main and step < total and step % (cfg.eval.every_steps or total + 1) == 0:
            curve = await evaluate_heldout(s, f"step{step:04d}")
            s.reporter.log_extra(step, curve)
    return s.reporter.history


async def evaluate_heldout(s: Session, phase: str) -> dict[str, float]:
    """``heldout_eval`` on the engine ``eval.precision`` picks (the rollout engine or its float32 twin)."""
    async with evaluation_engine(s.cfg, s.engine, s.lm, threads=s.cores) as engine:
        return await heldout_eval(s.cfg, engine, s.tokenizer, s.run_dir, phase)


async def _release_engine_memory(engine: Any) -> None:
    """An in-process engine is idle during a synchronous update: its KV buffers and prefix cache (which the
    weight sync would flush anyway) are freed so they do not add to the update's peak memory."""
    release = getattr(engine, "release_memory", None)
    if release is not None:
        await release()


async def _close(s: Session, *, failing: bool = False) -> None:
    """Close rollouts (envs and their sandboxes), buffer, engine and reporter, each even when another fails.

    ``failing``: the job is already ending on an exception (an abort signal, an error); a closing
    failure is then printed instead of raised, so it cannot replace the exception that ended the job.
    """
    orchestrator, buffer = s.orchestrator, getattr(s.orchestrator, "buffer", None)
    # Sandboxes first: on an abort they are what a slow close (plots, wandb) must not hold up.
    closers = [
        orchestrator and orchestrator.close,
        buffer and buffer.close,
        s.engine and s.engine.close,
        s.reporter.close,
    ]
    errors: list[Exception] = []
    for close in filter(None, closers):
        try:
            result = close()
            if asyncio.iscoroutine(result):
                await result
        except Exception as exc:  # the other parts must still close (containers, engine threads)
            errors.append(exc)
            if failing:
                print(f"[train] while stopping, {close.__qualname__} failed: {exc!r}", file=sys.stderr, flush=True)
    if errors and not failing:
        raise errors[0]


async def train_async(cfg: RunConfig, *, config_name: str = "run", resume: str | Path | None = None) -> Path:
    """Run (or resume) training; returns the run directory."""
    dist = init_distributed()
    validate_run_config(cfg, dist.world_size)
    cores = torch.get_num_threads()
    threads = threads_for(cfg.trainer.mode, cfg.trainer.threads, cores)
    if threads is not None:  # before the engine starts its thread: new threads take the process setting
        torch.set_num_threads(threads)
    run_dir = make_run_dir(cfg, config_name, resume) if dist.is_main else None
    run_dir = Path(_broadcast(str(run_dir) if run_dir else None, dist))
    session = await build_session(cfg, run_dir, dist, resume is not None)
    if cfg.trainer.threads is None:  # threads the user pinned stay pinned
        session.cores = cores
        engine_threads(session, cores)  # an in-process engine runs alone until an async update overlaps it
    before: dict[str, float] = {}
    after: dict[str, float] = {}
    signals = StopSignals(resume_hint=f"Resume with: {resume_command(run_dir)}")
    boundaries = StepBoundaries(cfg.trainer, dist, signals)
    stopped = False
    with signals:  # a signal outside the step loop aborts at once (agentrl/trainer/interrupt.py)
        try:
            if dist.is_main and session.start_step:
                carried = await session.orchestrator.load()
                print(f"[train] resumed {run_dir} from checkpoint step {session.start_step}: {carried}", flush=True)
                note = finished_run_note(cfg, run_dir, session.start_step)
                if note is not None:
                    print(f"[train] {note}", flush=True)
            if dist.is_main and session.start_step == 0:
                before = await evaluate_heldout(session, "before")
                if before:
                    session.reporter.log_extra(0, before)
            with signals.graceful():
                history = await run_loop(session, boundaries)
            last_step = history[-1]["step"] if history else session.start_step
            # A stop asked during the last step also skips the evaluation after training (--resume runs it).
            stopped = boundaries.stopped_at is not None or signals.requested is not None
            if stopped and last_step >= cfg.trainer.steps:  # nothing is left to resume but the evaluation
                stopped = False
                if dist.is_main:
                    print(f"[train] {stopped_in_last_step_note(cfg, run_dir, last_step)}", flush=True)
            elif (
                dist.is_main
                and cfg.eval.splits
                and not stopped
                and (session.start_step < last_step or after_eval_pending(cfg, run_dir))
            ):
                after = await evaluate_heldout(session, "after")
                session.reporter.log_extra(last_step, after)
        except BaseException:
            await _close(session, failing=True)
            raise
        await _close(session)
    if stopped:
        raise _stopped(last_step, signals, run_dir, dist)
    for line in summary_lines(before, after):
        print(f"[train] {line}", flush=True)
    return run_dir


def _stopped(step: int, signals: StopSignals, run_dir: Path, dist: DistInfo) -> TrainingStopped:
    why = signals.requested or "a stop signal on another rank"
    text = (
        f"stopped after step {step} on {why}; checkpoint {run_dir / 'checkpoints' / f'step_{step:06d}'}. "
        f"Resume with: {resume_command(run_dir)}"
    )
    if dist.is_main:
        print(f"[train] {text}", flush=True)
    return TrainingStopped(text)


def train(cfg: RunConfig, *, config_name: str = "run", resume: str | Path | None = None) -> Path:
    """Blocking entry point of ``agentrl train``."""
    try:
        run_dir = asyncio.run(train_async(cfg, config_name=config_name, resume=resume))
    except TrainingStopped:
        close_distributed()  # every rank stopped at the same agreed boundary: no collective is in flight
        raise
    close_distributed()
    return run_dir
