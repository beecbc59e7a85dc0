"""trainer.mode async (one step off) end to end on the tiny model: the lag-0 first step updates exactly like sync,
later steps train tokens one version old with the engine and the trainer busy at once, and the staleness bound holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from safetensors.torch import load_file

from agentrl.errors import ConfigError
from agentrl.job.loader import load_config


def _config(tmp_path: Path, model_dir: Path, **rollout: Any) -> Path:
    data: dict[str, Any] = {
        "model": {"path": str(model_dir), "device": "cpu"},
        "engine": {"kind": "embedded", "max_batch_size": 16, "max_seq_len": 512},
        "env": {"id": "agentrl/MagicWord-v0", "kwargs": {"word": "please", "turns": 1}},
        "rollout": {
            "group_size": 4,
            "prompts_per_step": 4,
            "partial_rollout": False,
            "max_new_tokens": 8,
            "max_episode_tokens": 256,
            **rollout,
        },
        "trainer": {
            "steps": 3,
            "lr": 1e-2,
            "mini_batches": 2,
            "checkpoint_every_steps": 1,
            "deterministic": True,
            "threads": 1,
            "keep_checkpoints": 5,
        },
        "logging": {"run_root": str(tmp_path / "runs"), "wandb_mode": "disabled", "progress": False},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "episode/reward_mean" in r]


def _weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoints" / f"step_{step:06d}" / "model" / "model.safetensors")


@pytest.mark.slow
def test_async_first_step_updates_like_sync_and_later_steps_overlap_with_lag_one(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from agentrl.trainer.loop import train

    path = _config(tmp_path, tiny_model_dir)
    sync_dir = train(load_config(path, ["logging.run_name=sync"]), config_name="run")
    async_dir = train(load_config(path, ["logging.run_name=async", "trainer.mode=async"]), config_name="run")
    sync, asyn = _records(sync_dir), _records(async_dir)
    assert [r["step"] for r in asyn] == [1, 2, 3]
    # step 1 is collected alone (lag 0): the same batch, the same update
    for key in ("episode/reward_mean", "train/loss", "train/grad_norm", "train/trained_tokens"):
        assert asyn[0][key] == pytest.approx(sync[0][key], rel=1e-5, abs=1e-6), key
    # The same update up to the engine's ~5e-7 logprob noise from continuous batching, which Adam's first
    # step (g / |g|) can amplify on near-zero gradients: compare the updates, not single weights.
    a, s = _weights(async_dir, 1), _weights(sync_dir, 1)
    base = load_file(tiny_model_dir / "model.safetensors")
    gap = sum(float(((a[k] - s[k]) ** 2).sum()) for k in s) ** 0.5
    update = sum(float(((s[k] - base[k]) ** 2).sum()) for k in s if k in base) ** 0.5
    assert update > 0 and gap <= 0.02 * update, (gap, update)
    assert sync[0]["train/token_lag_max"] == 0.0 and asyn[0]["train/token_lag_max"] == 0.0
    # steps 2 and 3 were collected during the previous update, with the weights one version behind
    for record in asyn[1:]:
        assert record["train/token_lag_mean"] == 1.0 and record["train/token_lag_max"] == 1.0
    for record in asyn[:2]:  # steps 1 and 2 overlapped with the next collection; step 3 is the last
        assert record["perf/overlap_s"] > 0.0 and record["perf/collect_s"] > 0.0
    assert asyn[2]["perf/overlap_s"] == 0.0
    assert all(r["async/stale_dropped_frac"] == 0.0 for r in asyn)
    assert all(r["train/token_lag_max"] == 0.0 for r in sync)  # sync never trains a stale token here


@pytest.mark.slow
def test_async_partials_respect_the_staleness_bound(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agentrl.trainer.loop import train

    path = _config(tmp_path, tiny_model_dir, partial_rollout=True, over_sample=2.0, max_new_tokens=24, max_staleness=1)
    overrides = [
        "logging.run_name=bound",
        "trainer.mode=async",
        "trainer.steps=5",
        "trainer.checkpoint_every_steps=100",
    ]
    records = _records(train(load_config(path, overrides), config_name="run"))
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert max(r["train/token_lag_max"] for r in records) <= 1.0  # nothing older than max_staleness is trained
    assert max(r["rollout/staleness_max"] for r in records) <= 1.0
    carried = sum(r["rollout/groups_carried"] for r in records)
    # a partial carried into step k+1's collection was sampled two versions before the weights that train it
    assert carried > 0 and sum(r["rollout/stale_discarded_tokens"] for r in records) > 0


def test_async_needs_a_staleness_bound_of_at_least_one(tiny_model_dir: Path, tmp_path: Path) -> None:
    path = _config(tmp_path, tiny_model_dir)
    with pytest.raises(ConfigError, match="rollout.max_staleness"):
        load_config(path, ["trainer.mode=async", "rollout.max_staleness=0"])
    with pytest.raises(ConfigError, match="algorithm.max_token_lag"):
        load_config(path, ["trainer.mode=async", "algorithm.max_token_lag=0"])
    from agentrl.trainer.validate import validate_run_config

    with pytest.raises(ConfigError, match="torchrun"):
        validate_run_config(load_config(path, ["trainer.mode=async"]), world_size=2)


def test_thread_defaults_per_mode_and_async_progress_line() -> None:
    from agentrl.trainer.async_loop import stale_dropped_fraction, threads_for
    from agentrl.trainer.reporting import progress_line

    assert threads_for("sync", None, 2) is None  # torch's default: every core to whichever side runs
    assert threads_for("async", None, 2) == 1 and threads_for("async", None, 1) == 1
    assert threads_for("async", 3, 2) == 3
    frac = stale_dropped_fraction({"rollout/stale_discarded_tokens": 30.0}, {"train/trained_tokens": 90.0})
    assert frac == pytest.approx(0.25)
    line = progress_line(
        2,
        4,
        {
            "train/token_lag_mean": 1.0,
            "train/token_lag_max": 1,
            "async/stale_dropped_frac": 0.25,
            "perf/overlap_s": 3.2,
        },
    )
    assert line.endswith("lag 1.0/1 stale 25% overlap 3.2s")


@pytest.mark.parametrize("engine_idle", [False, True])
def test_async_update_widens_to_every_core_once_the_engine_is_idle(tiny_lm: torch.nn.Module, engine_idle: bool) -> None:
    """The update starts on its share of the cores; micro-batches that start after the collection finished run
    on all of them (``Session.cores``); the hook is removed after the update."""
    import threading
    from types import SimpleNamespace

    from trainer_episodes import make_groups

    from agentrl.algos.config import AlgorithmConfig
    from agentrl.config.sections import TrainerConfig
    from agentrl.trainer.async_loop import _update
    from agentrl.trainer.batch import build_rows
    from agentrl.trainer.logprobs import PolicyLogprobs
    from agentrl.trainer.update import PolicyUpdater

    algo = AlgorithmConfig()
    updater = PolicyUpdater(
        PolicyLogprobs(tiny_lm), algo, TrainerConfig(micro_batch_tokens=64), temperature=1.0, total_steps=1
    )
    seen: list[int] = []
    micro_loss = updater._micro_loss
    updater._micro_loss = lambda *a: (seen.append(torch.get_num_threads()), micro_loss(*a))[1]  # type: ignore[method-assign]
    rows = build_rows(make_groups(tiny_lm, [[1.0, 0.0, 0.3, 0.8]], turns=3), 4, algo, 0)
    session = SimpleNamespace(updater=updater, cores=2, cfg=SimpleNamespace(algorithm=algo))
    event = threading.Event()
    if engine_idle:
        event.set()
    outside = torch.get_num_threads()
    results: list[dict[str, float]] = []
    worker = threading.Thread(target=lambda: results.append(_update(session, rows, 1, 1, event).metrics))
    worker.start()
    worker.join()
    assert len(seen) >= 2  # several micro-batches, so the check below sees each one
    assert seen == ([2] * len(seen) if engine_idle else [1] * len(seen))
    assert results[0]["async/widened_micro_batches"] == (len(seen) if engine_idle else 0)
    assert updater.before_micro_batch is None and torch.get_num_threads() == outside  # this thread is untouched


def _record_forward_threads(engine: Any) -> list[int]:
    """The torch thread count of each of ``engine``'s forward steps, as its own thread sees it."""
    seen: list[int] = []
    step = engine.runner.step
    engine.runner.step = lambda *a: (step(*a), seen.append(torch.get_num_threads()))[0]  # after: step applies it
    return seen


def test_engine_forwards_take_the_threads_set_from_another_thread(tiny_model_dir: Path) -> None:
    import asyncio

    from agentrl.engines.base import SamplingParams
    from agentrl.engines.embedded.engine import EmbeddedEngine

    async def run() -> list[list[int]]:
        engine = EmbeddedEngine.from_pretrained(tiny_model_dir)
        seen = _record_forward_threads(engine)
        sampling = SamplingParams(max_new_tokens=4, ignore_eos=True)
        rounds = []
        try:
            for threads in (1, 2, None):  # None leaves the last setting
                engine.set_threads(threads)
                await engine.generate([1, 2, 3], sampling)
                rounds.append(list(seen))
                seen.clear()
        finally:
            await engine.close()
        return rounds

    assert asyncio.run(run()) == [[1] * 4, [2] * 4, [2] * 4]


def test_the_engine_shares_cores_during_the_update_and_takes_them_all_after_it(
    tiny_model_dir: Path, tiny_lm: torch.nn.Module
) -> None:
    """The orchestrator is a stand-in that generates once while the update runs and once after it: the order
    a real collection has when the update is shorter, made certain here instead of left to timing."""
    import asyncio
    import threading
    from types import SimpleNamespace

    from trainer_episodes import make_groups

    from agentrl.algos.config import AlgorithmConfig
    from agentrl.config.sections import TrainerConfig
    from agentrl.engines.base import SamplingParams
    from agentrl.engines.embedded.engine import EmbeddedEngine
    from agentrl.trainer.async_loop import _overlapped
    from agentrl.trainer.batch import build_rows
    from agentrl.trainer.logprobs import PolicyLogprobs
    from agentrl.trainer.update import PolicyUpdater

    algo = AlgorithmConfig()
    updater = PolicyUpdater(PolicyLogprobs(tiny_lm), algo, TrainerConfig(), temperature=1.0, total_steps=1)
    updated = threading.Event()
    update = updater.update
    updater.update = lambda *a, **k: (update(*a, **k), updated.set())[0]  # type: ignore[method-assign]
    rows = build_rows(make_groups(tiny_lm, [[1.0, 0.0, 0.3, 0.8]], turns=1), 4, algo, 0)
    sampling = SamplingParams(max_new_tokens=3, ignore_eos=True)

    async def run() -> tuple[list[int], list[int]]:
        engine = EmbeddedEngine.from_pretrained(tiny_model_dir)
        seen = _record_forward_threads(engine)
        during: list[int] = []

        async def collect_step(step: int) -> Any:
            await engine.generate([1, 2, 3], sampling)
            during.extend(seen)
            seen.clear()
            while not updated.is_set():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # the update's done-callback runs on this loop
            await engine.generate([1, 2, 3], sampling)
            return SimpleNamespace(groups=[], metrics={}, exhausted=False)

        session = SimpleNamespace(
            engine=engine, cores=2, updater=updater, cfg=SimpleNamespace(algorithm=algo), orchestrator=None
        )
        session.orchestrator = SimpleNamespace(collect_step=collect_step, version_lead=0)
        torch.set_num_threads(1)  # the event loop thread's share, as train_async sets it in async mode
        try:
            await _overlapped(session, 1, rows, collect_next=True)
        finally:
            await engine.close()
        return during, seen

    outside = torch.get_num_threads()
    try:
        during, after = asyncio.run(run())
    finally:
        torch.set_num_threads(outside)
    assert during == [1] * 3 and after == [2] * 3


@pytest.mark.slow
def test_async_with_recompute_stale_forwards_exactly_the_rows_sampled_by_older_weights(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The decoupled objective async needs: step 1 is sampled by the weights it trains (nothing to recompute);
    every later step was sampled during the previous update, so each of its trained rows is forwarded once."""
    from agentrl.trainer.loop import train

    path = _config(tmp_path, tiny_model_dir)
    overrides = [
        "logging.run_name=async_stale",
        "trainer.mode=async",
        "algorithm.old_logprobs=engine",
        "algorithm.proximal=recompute_stale",
        "algorithm.is_correction={kind: tis, cap: 2.0}",
    ]
    records = _records(train(load_config(path, overrides), config_name="run"))
    assert [r["step"] for r in records] == [1, 2, 3]
    assert records[0]["train/recomputed_rows"] == 0
    for record in records[1:]:
        trained = record["train/rows"] - record["train/skipped_zero_adv_rows"]
        assert record["train/token_lag_mean"] == 1.0  # every trained token is one version old
        assert trained > 0 and record["train/recomputed_rows"] == trained


@pytest.mark.slow
def test_the_first_step_after_resume_trains_the_handed_batch_with_lag_one(tiny_model_dir: Path, tmp_path: Path) -> None:
    """docs/async.md: the checkpoint of step k holds step k+1's handed batch, sampled by version k-1; a resume
    trains it first, with lag 1 (the doc said lag 0)."""
    import shutil

    from agentrl.trainer.loop import train

    path = _config(tmp_path, tiny_model_dir)
    run_dir = train(load_config(path, ["logging.run_name=async", "trainer.mode=async"]), config_name="run")
    for step in (2, 3):  # as if killed after step 1's checkpoint: the resume starts from it
        shutil.rmtree(run_dir / "checkpoints" / f"step_{step:06d}")
    (run_dir / "checkpoints" / "latest").write_text("step_000001")
    train(load_config(path, ["logging.run_name=async", "trainer.mode=async"]), config_name="run", resume=run_dir)
    resumed = [r for r in _records(run_dir) if r["step"] == 2][-1]
    assert resumed["train/token_lag_mean"] == 1.0 and resumed["train/token_lag_max"] == 1.0
