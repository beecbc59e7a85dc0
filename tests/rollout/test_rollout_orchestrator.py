"""The orchestrator with the tiny model and the embedded engine: groups, verbatim tokens and logprobs,
partial rollouts across weight updates, staleness policies, failures, resume from the buffer."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from rollout_test_envs import (
    AsyncScratchpad,
    CutoffGradedScratchpad,
    FlakyScratchpad,
    GradedScratchpad,
    Scratchpad,
    SnapshotScratchpad,
)

from agentrl.config.sections import RolloutConfig
from agentrl.engines.base import GenerateResult, SamplingParams
from agentrl.errors import RolloutBufferError, RolloutError
from agentrl.rollout.buffer import RolloutBuffer
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.orchestrator import RolloutOrchestrator
from agentrl.trajectory import Episode

# Replies of 4 tokens, but 64 from the second turn on in long tasks (see Scratchpad._cap).
LONG = {"long_tasks": ("task-1", "task-2"), "long_reply_tokens": 64, "reply_tokens": 4, "long_from_turn": 1}


class RecordingEngine:
    """Delegates to a real engine and records each (input_ids, result): a recorder, not a fake."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, []
        self.semantics = inner.semantics

    async def generate(
        self, input_ids: list[int], sampling: SamplingParams, request_id: str | None = None
    ) -> GenerateResult:
        result = await self.inner.generate(input_ids, sampling, request_id)
        self.calls.append((list(input_ids), result))
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _cfg(**kwargs: Any) -> RolloutConfig:
    base = {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 8, "max_episode_tokens": 700, "over_sample": 2.0}
    return RolloutConfig(**(base | kwargs))


def _long_cfg(**kwargs: Any) -> RolloutConfig:
    """For LONG envs: max_new_tokens only bounds; the env caps each reply itself."""
    return _cfg(**({"max_new_tokens": 64} | kwargs))


def _orchestrator(
    engine: Any, tokenizer: Any, cfg: RolloutConfig, env: Callable[[], Any], buffer: RolloutBuffer | None = None
) -> RolloutOrchestrator:
    return RolloutOrchestrator(
        engine, env, tokenizer, cfg, dataset=TaskDataset.from_env(env(), epochs=1), buffer=buffer
    )


def _turn_starts(ep: Episode) -> dict[int, int]:
    seg = ep.segment
    starts: dict[int, int] = {}
    for i, (turn, mask) in enumerate(zip(seg.turn_ids, seg.loss_mask)):
        if mask and turn not in starts:
            starts[turn] = i
    return starts


@pytest.mark.parametrize("prefix_cache_tokens", [16384, 0])
def test_prefill_accounting_separates_new_tokens_from_recomputed_ones(
    tiny_model_dir: Path, tiny_tokenizer: Any, prefix_cache_tokens: int
) -> None:
    """``new_prompt_tokens``: what the episodes had not sent before (the floor a prefix cache allows);
    ``recomputed_prompt_tokens``: what the engine computed beyond it. With the cache the engine recomputes
    nothing; without it every later turn recomputes its history."""
    from agentrl.engines.embedded.config import EmbeddedEngineConfig
    from agentrl.engines.embedded.engine import EmbeddedEngine

    async def scenario() -> tuple[Any, RecordingEngine]:
        config = EmbeddedEngineConfig(max_seq_len=1024, seed=0, prefix_cache_tokens=prefix_cache_tokens)
        engine = RecordingEngine(EmbeddedEngine.from_pretrained(tiny_model_dir, config=config))
        orch = _orchestrator(
            engine, tiny_tokenizer, _cfg(group_size=3, partial_rollout=False), lambda: Scratchpad(num_tasks=4)
        )
        batch = await orch.collect_step(1)
        await orch.close()
        await engine.inner.close()
        return batch, engine

    batch, engine = asyncio.run(scenario())
    new = recomputed = 0
    for i, (prompt, result) in enumerate(engine.calls):
        # the episode's previous request: the longest earlier prompt + reply (less the last, sampled-only token)
        # that this prompt extends
        heads = [p + r.output_ids[:-1] for p, r in engine.calls[:i] if r.output_ids]
        head = max((len(h) for h in heads if prompt[: len(h)] == h and len(h) < len(prompt)), default=0)
        new += len(prompt) - head
        recomputed += max(0, result.prompt_tokens - result.cached_tokens - (len(prompt) - head))
    metrics = batch.metrics
    assert metrics["rollout/new_prompt_tokens"] == new and metrics["rollout/recomputed_prompt_tokens"] == recomputed
    if prefix_cache_tokens:
        assert recomputed == 0 and metrics["rollout/computed_prompt_tokens"] <= new
    else:
        assert recomputed > 0 and metrics["rollout/computed_prompt_tokens"] >= recomputed


def test_groups_tokens_and_logprobs_come_from_the_engine(
    make_engine: Callable[[], Any], tiny_tokenizer: Any, tiny_model_dir: Path
) -> None:
    async def scenario() -> tuple[Any, RecordingEngine, RolloutOrchestrator]:
        engine = RecordingEngine(make_engine())
        orch = _orchestrator(
            engine, tiny_tokenizer, _cfg(group_size=3, partial_rollout=False), lambda: Scratchpad(num_tasks=4)
        )
        batch = await orch.collect_step(1)
        await orch.close()
        await engine.inner.close()
        return batch, engine, orch

    batch, engine, orch = asyncio.run(scenario())
    assert len(batch.groups) == 2 and len({g[0].task_id for g in batch.groups}) == 2
    for group in batch.groups:
        assert len(group) == 3 and len({e.episode_id for e in group}) == 3
        assert len({(e.task_id, e.group_id, e.seed) for e in group}) == 1 and all(e.status == "complete" for e in group)
    calls: dict[tuple[int, ...], list[GenerateResult]] = {}
    for inp, res in engine.calls:
        calls.setdefault(tuple(inp), []).append(res)
    for ep in (e for g in batch.groups for e in g):
        seg = ep.segment
        for turn, start in _turn_starts(ep).items():
            # The engine saw exactly this prefix and returned exactly these tokens and logprobs.
            [res] = [
                r
                for r in calls[tuple(seg.prompt_ids + seg.completion_ids[:start])]
                if r.output_ids == seg.completion_ids[start : start + len(r.output_ids)]
            ]
            n = len(res.output_ids)
            assert seg.logprobs[start : start + n] == res.logprobs and res.finish_reason != "abort"
            assert seg.loss_mask[start : start + n] == [1] * n and seg.turn_ids[start : start + n] == [turn] * n
            assert seg.versions[start : start + n] == res.token_versions()
        rendered = orch.assembler.render(ep.messages[:-1], add_generation_prompt=True)
        assert orch.assembler.decode(seg.input_ids).startswith(rendered)  # env messages rendered once, by the template
    # later turns (and a group's shared first prompt) reuse keys/values, and the step says how many
    prompt = sum(r.prompt_tokens for _, r in engine.calls)
    cached = sum(r.cached_tokens for _, r in engine.calls)
    assert batch.metrics["rollout/prompt_tokens"] == prompt
    assert batch.metrics["rollout/cached_prompt_frac"] == pytest.approx(cached / prompt)
    assert batch.metrics["rollout/computed_prompt_tokens"] == prompt - cached
    assert 0.3 < cached / prompt < 1.0
    ep = batch.groups[0][0]
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([ep.segment.input_ids])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    p = len(ep.segment.prompt_ids)
    mask = torch.tensor(ep.segment.loss_mask, dtype=torch.bool)
    ids = torch.tensor(ep.segment.completion_ids)
    recomputed = logp[p - 1 : p - 1 + len(ids)].gather(1, ids[:, None])[:, 0]
    assert torch.allclose(recomputed[mask], torch.tensor(ep.segment.logprobs)[mask], atol=1e-4)


async def _partial_step(
    engine: Any,
    tokenizer: Any,
    cfg: RolloutConfig,
    buffer: RolloutBuffer,
    env: Callable[[], Any] = lambda: Scratchpad(num_tasks=4, **LONG),
) -> tuple[RolloutOrchestrator, list[Episode]]:
    orch = _orchestrator(engine, tokenizer, cfg, env, buffer)
    batch = await orch.collect_step(1)
    orch.commit_step(1)
    assert sorted(g[0].task_id for g in batch.groups) == ["task-0", "task-3"]
    stored = [copy.deepcopy(e) for g in buffer.load_groups(("inflight",)) for e in g.episodes]
    assert len(stored) == 4 and all(e.status == "partial" for e in stored), [
        (e.task_id, e.status, len(e.turns), e.error) for e in stored
    ]
    assert any(e.turns and e.turns[-1].reward is None and e.turns[-1].num_tokens > 0 for e in stored)  # cut mid-turn
    assert batch.metrics["rollout/episodes_aborted"] == 4
    return orch, stored


async def _perturb(engine: Any, version: int) -> None:
    gen = torch.Generator().manual_seed(version)
    state = {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in engine.runner.model.state_dict().items()}
    await engine.update_weights(state, version=version)


def _assert_prefix(before: Episode, after: Episode) -> int:
    b, a = before.segment, after.segment
    n = len(b.completion_ids)
    assert a.prompt_ids == b.prompt_ids and a.completion_ids[:n] == b.completion_ids
    assert a.logprobs[:n] == b.logprobs and a.versions[:n] == b.versions and a.loss_mask[:n] == b.loss_mask
    return n


def test_partial_episodes_resume_with_identical_prefix_and_new_version(
    make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    async def scenario() -> None:
        engine = make_engine()
        orch, stored = await _partial_step(engine, tiny_tokenizer, _long_cfg(), RolloutBuffer(tmp_path / "b.sqlite"))
        await _perturb(engine, version=1)
        batch = await orch.collect_step(2)
        finals = {e.episode_id: e for g in batch.groups for e in g}
        assert set(finals) == {e.episode_id for e in stored} and batch.metrics["rollout/episodes_resumed"] == 4
        for before in stored:
            after = finals[before.episode_id]
            n = _assert_prefix(before, after)
            new = [v for v, m in zip(after.segment.versions[n:], after.segment.loss_mask[n:]) if m]
            assert new and set(new) == {1} and after.status == "complete" and after.resumed == 1
        await orch.close()
        await engine.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("policy", ["drop", "mask"])
def test_staleness_policies(policy: str, make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path) -> None:
    async def scenario() -> None:
        engine = make_engine()
        cfg = _long_cfg(max_staleness=1, staleness_policy=policy)
        orch, stored = await _partial_step(engine, tiny_tokenizer, cfg, RolloutBuffer(tmp_path / "b.sqlite"))
        await _perturb(engine, version=3)
        batch = await orch.collect_step(2)
        finals = [e for g in batch.groups for e in g]
        if policy == "drop":
            assert batch.metrics["rollout/episodes_restarted"] == 4
            # every token the stale partials had sampled was thrown away, and is counted
            assert batch.metrics["rollout/stale_discarded_tokens"] == sum(e.segment.num_sampled for e in stored) > 0
            assert not {e.episode_id for e in finals} & {e.episode_id for e in stored}
            assert all(e.min_version == 3 for e in finals) and {e.group_id for e in finals} == {
                e.group_id for e in stored
            }
        else:
            assert batch.metrics["rollout/episodes_restarted"] == 0 and batch.metrics["rollout/staleness_3"] == 4
            assert batch.metrics["rollout/stale_discarded_tokens"] == 0
            assert all(e.min_version == 0 for e in finals)
        await orch.close()
        await engine.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(("env_cls", "method"), [(Scratchpad, "replay"), (SnapshotScratchpad, "snapshot")])
def test_resume_from_buffer_in_a_new_orchestrator_restores_the_env(
    env_cls: type, method: str, make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    async def scenario() -> None:
        engine = make_engine()
        env = lambda: env_cls(num_tasks=4, **LONG)  # noqa: E731
        orch, stored = await _partial_step(
            engine, tiny_tokenizer, _long_cfg(), RolloutBuffer(tmp_path / "b.sqlite"), env
        )
        await orch.close()  # the job ends; a new one resumes from the file
        fresh = _orchestrator(engine, tiny_tokenizer, _long_cfg(), env, RolloutBuffer(tmp_path / "b.sqlite"))
        batch = await fresh.collect_step(2)
        assert {m for _, m, _ in fresh.restore_log} == {method}
        finals = {e.episode_id: e for g in batch.groups for e in g}
        for before in stored:
            after = finals[before.episode_id]
            _assert_prefix(before, after)
            stepped = [t for t in before.turns if t.reward is not None]
            expected = stepped[-1].info["vars_after"] if stepped else {"seed": str(before.seed)}
            assert after.turns[len(stepped)].info["vars_before"] == expected  # env state equals the pre-kill state
        await fresh.close()
        await engine.close()

    asyncio.run(scenario())


def test_resume_with_another_chat_template_is_refused(
    make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    async def scenario() -> None:
        engine = make_engine()
        env = lambda: Scratchpad(num_tasks=4)  # noqa: E731
        orch = _orchestrator(engine, tiny_tokenizer, _cfg(), env, RolloutBuffer(tmp_path / "b.sqlite"))
        await orch.collect_step(1)
        await orch.close()
        other = copy.deepcopy(tiny_tokenizer)
        other.chat_template = other.chat_template.replace("'\\n'", "'\\n\\n'", 1)
        with pytest.raises(RolloutBufferError, match="chat_template"):
            _orchestrator(engine, other, _cfg(), env, RolloutBuffer(tmp_path / "b.sqlite"))
        await engine.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("on_failure", ["drop", "fail"])
def test_env_that_raises_in_step(
    on_failure: str, make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    async def scenario() -> None:
        engine = make_engine()
        buffer = RolloutBuffer(tmp_path / "b.sqlite")
        first = TaskDataset.from_env(Scratchpad(num_tasks=4)).task_at(0)  # the first task issued fails
        env = lambda: FlakyScratchpad(num_tasks=4, fail_tasks=(first,))  # noqa: E731
        orch = _orchestrator(engine, tiny_tokenizer, _cfg(on_failure=on_failure, partial_rollout=False), env, buffer)
        try:
            if on_failure == "fail":
                with pytest.raises(RolloutError, match="sandbox crashed"):
                    await orch.collect_step(1)
                assert buffer.last_step() is None  # nothing half-written
                return
            batch = await orch.collect_step(1)
            assert len(batch.groups) == 2 and first not in {g[0].task_id for g in batch.groups}
            [dropped] = batch.dropped
            assert dropped[0].task_id == first and any(
                f"env: FlakyScratchpad.step raised RuntimeError: sandbox crashed on {first}" in (e.error or "")
                for e in dropped
            )
            assert batch.metrics["rollout/groups_dropped"] == 1 and buffer.counts()["dropped"] == 1
            assert [g.step for g in buffer.load_groups(("dropped",))] == [1]  # archived with step 1, not before
        finally:
            await orch.close()
            await engine.close()

    asyncio.run(scenario())


def test_engine_dying_mid_step_is_a_clear_error(
    make_engine: Callable[[], Any], tiny_tokenizer: Any, tmp_path: Path
) -> None:
    async def scenario() -> None:
        engine = make_engine()
        buffer = RolloutBuffer(tmp_path / "b.sqlite")
        orch = _orchestrator(engine, tiny_tokenizer, _long_cfg(), lambda: Scratchpad(num_tasks=4, **LONG), buffer)
        step = asyncio.create_task(orch.collect_step(1))
        while engine.load()["num_running_reqs"] == 0:
            await asyncio.sleep(0.01)
        await engine.close()  # the engine goes away with requests in flight
        with pytest.raises(RolloutError, match="engine"):
            await step
        assert buffer.last_step() is None
        await orch.close()

    asyncio.run(scenario())


def test_async_env_methods_are_used_when_present(make_engine: Callable[[], Any], tiny_tokenizer: Any) -> None:
    async def scenario() -> None:
        engine = make_engine()
        orch = _orchestrator(engine, tiny_tokenizer, _cfg(partial_rollout=False), lambda: AsyncScratchpad(num_tasks=2))
        batch = await orch.collect_step(1)
        assert [e.status for g in batch.groups for e in g] == ["complete"] * 4 and not batch.dropped
        await orch.close()
        await engine.close()

    asyncio.run(scenario())


def test_env_outcome_is_kept_apart_from_the_turn_rewards(make_engine: Callable[[], Any], tiny_tokenizer: Any) -> None:
    """R_i is info["outcome"] when the env sets one (marked separate), else the sum of the turn rewards."""

    async def scenario() -> None:
        engine = make_engine()
        cfg = _cfg(partial_rollout=False)
        batches = []
        try:
            for env in (lambda: GradedScratchpad(num_tasks=2), lambda: Scratchpad(num_tasks=2)):
                orch = _orchestrator(engine, tiny_tokenizer, cfg, env)
                batches.append(await orch.collect_step(1))
                await orch.close()
        finally:
            await engine.close()
        graded, plain = batches
        for ep in (e for g in graded.groups for e in g):
            assert ep.turn_rewards == [0.25, 0.25, 0.25]
            assert ep.outcome == ep.final_reward == float(ep.task_id == "task-0")
        for ep in (e for g in plain.groups for e in g):
            assert ep.outcome is None and ep.final_reward == sum(ep.turn_rewards)

    asyncio.run(scenario())


def test_an_episode_cut_off_before_its_verdict_scores_the_envs_cutoff_outcome(
    make_engine: Callable[[], Any], tiny_tokenizer: Any
) -> None:
    """rollout.max_turns ends a 3-turn graded episode after 2 paid turns: without cutoff_outcome its R is the sum of
    those turn rewards (0.5, more than a failing verdict's 0); with cutoff_outcome 0.0 it scores as a failure."""

    async def scenario() -> None:
        engine = make_engine()
        cfg = _cfg(partial_rollout=False, max_turns=2)
        batches = []
        try:
            for env in (lambda: GradedScratchpad(num_tasks=2), lambda: CutoffGradedScratchpad(num_tasks=2)):
                orch = _orchestrator(engine, tiny_tokenizer, cfg, env)
                batches.append(await orch.collect_step(1))
                await orch.close()
        finally:
            await engine.close()
        plain, cutoff = ([e for g in b.groups for e in g] for b in batches)
        assert all(len(e.turns) == 2 and e.outcome is None and e.final_reward == 0.5 for e in plain)
        assert all(len(e.turns) == 2 and e.outcome == e.final_reward == 0.0 for e in cutoff)
        assert all(e.turn_rewards == [0.25, 0.25] for e in cutoff)  # the turn signals stay

    asyncio.run(scenario())
