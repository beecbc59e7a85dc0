"""One builder of the rollout stack and one maker of run directories, shared by train, rollout and eval."""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from agentrl.config.sections import LoggingConfig
from agentrl.errors import ConfigError, RolloutBufferError
from agentrl.job.loader import load_config
from agentrl.job.rundir import new_run_dir, resumed_run_dir
from agentrl.job.stack import build_rollout_stack, eval_plan, load_run_tokenizer
from agentrl.rollout.buffer import BUFFER_FILE


def _cfg(model_dir: Path, tmp_path: Path, *overrides: str) -> Any:
    base = [
        f"model.path={model_dir}",
        "model.device=cpu",
        "env.id=rollout_test_envs:Scratchpad",
        "env.import_modules=[]",
        "engine.max_seq_len=512",
        "rollout.max_new_tokens=4",
        "rollout.max_episode_tokens=256",
        "trainer.mini_batches=1",
        f"logging.run_root={tmp_path / 'runs'}",
    ]
    return load_config(None, [*base, *overrides])


def test_a_run_directory_that_holds_a_run_is_never_reused_silently(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = _cfg(tiny_model_dir, tmp_path, "logging.run_name=r")
    run_dir = new_run_dir(cfg.logging, "cfg")
    assert run_dir == tmp_path / "runs" / "r" and run_dir.is_dir()
    assert new_run_dir(cfg.logging, "cfg") == run_dir  # an empty directory is still free
    (run_dir / BUFFER_FILE).touch()
    with pytest.raises(ConfigError, match=f"already holds a run .*pass --resume {run_dir}"):
        new_run_dir(cfg.logging, "cfg")
    (run_dir / BUFFER_FILE).unlink()
    (run_dir / "checkpoints").mkdir()
    with pytest.raises(ConfigError, match="already holds a run"):
        new_run_dir(cfg.logging, "cfg")
    with pytest.raises(ConfigError, match="no rollout_buffer.sqlite in that directory"):
        resumed_run_dir(run_dir, needs=BUFFER_FILE, command="agentrl rollout")
    unnamed = _cfg(tiny_model_dir, tmp_path)
    assert new_run_dir(unnamed.logging, "quick").name.startswith("quick-")


def _claim_five(run_root: str, out: Any) -> None:
    cfg = LoggingConfig(run_root=run_root)
    out.put([str(new_run_dir(cfg, "sweep")) for _ in range(5)])


def test_unnamed_runs_started_together_get_their_own_directories(tmp_path: Path) -> None:
    """Four processes claiming five run directories each, within a second or two: twenty distinct directories."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    jobs = [context.Process(target=_claim_five, args=(str(tmp_path), out)) for _ in range(4)]
    for job in jobs:
        job.start()
    claimed = [path for _ in jobs for path in out.get(timeout=60)]
    for job in jobs:
        job.join(timeout=60)
    assert len(set(claimed)) == 20 and all(Path(path).is_dir() for path in claimed)
    assert any(path.endswith("-2") for path in claimed)  # same-second names were bumped, not shared


def test_the_stack_builds_collects_and_closes(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = _cfg(tiny_model_dir, tmp_path, "rollout.group_size=2", "rollout.prompts_per_step=1")
    run_dir = new_run_dir(cfg.logging, "cfg")
    seen: list[Any] = []

    def prepare(engine: Any) -> Any:
        seen.append(engine)
        return engine

    stack = build_rollout_stack(cfg, run_dir, load_run_tokenizer(cfg), epochs=1, num_tasks=2, prepare_engine=prepare)

    async def collect() -> Any:
        try:
            return await stack.orchestrator.collect_step(1)
        finally:
            await stack.close()

    batch = asyncio.run(collect())
    assert seen == [stack.engine] and stack.dataset.total == 2
    assert len(batch.groups) == 1 and (run_dir / BUFFER_FILE).is_file()


def test_a_failing_engine_leaves_no_new_buffer_and_a_bad_old_one_fails_before_the_engine(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = _cfg(tiny_model_dir, tmp_path)
    run_dir = new_run_dir(cfg.logging, "cfg")

    def refuse(engine: Any) -> Any:
        raise ConfigError("engine refused by the test's check")

    with pytest.raises(ConfigError, match="refused"):
        build_rollout_stack(cfg, run_dir, load_run_tokenizer(cfg), prepare_engine=refuse)
    assert not (run_dir / BUFFER_FILE).exists()  # so a retry under the same run name is not refused
    (run_dir / BUFFER_FILE).write_bytes(b"\x00garbage" * 512)
    with pytest.raises(RolloutBufferError, match="corrupted"):
        build_rollout_stack(cfg, run_dir, load_run_tokenizer(cfg), prepare_engine=refuse)
    with pytest.raises(ConfigError, match="has no task ids; pass --num-tasks"):
        build_rollout_stack(
            _cfg(tiny_model_dir, tmp_path, "env.id=buggy_envs:Healthy"),
            run_dir,
            None,
            require_tasks="pass --num-tasks N",
        )


def test_eval_plan_overrides_split_samples_and_temperature(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = _cfg(tiny_model_dir, tmp_path, "env.id=agentrl/CodeExec-v0", "env.import_modules=[envs]")
    cfg = cfg.model_copy(update={"env": cfg.env.model_copy(update={"kwargs": {"sandbox": {"kind": "process"}}})})
    plan = eval_plan(cfg, samples=3, split="test_kinds", temperature=0.0, max_tasks=2)
    assert plan.task_ids is not None and len(plan.task_ids) == 2
    assert all(task.split("/")[1] in ("conditionals", "sets") for task in plan.task_ids)
    assert (plan.rollout.group_size, plan.rollout.partial_rollout, plan.rollout.temperature) == (3, False, 0.0)
    env = plan.env_factory()
    assert env.config.split == "test_kinds"
    env.close()
