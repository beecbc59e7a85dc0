"""Canary tasks: indistinguishable copies of real tasks that no honest answer passes, measuring reward hacking
while training. The code envs mix them into the train split and mark them in ``info["canary"]``; agentrl keeps
them out of the loss, logs ``integrity/canary_pass_rate``, flags and warns on a pass.

The forged-verdict test drives a real rollout (embedded engine, the real env and sandbox) with a named fake in
the reward path: ``AcceptEverythingGrader``, a judge patched to accept every test, which is what a successful
exploit of the grading would look like from outside.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agentrl.algos.config import AlgorithmConfig
from agentrl.cli.main import main
from agentrl.config.sections import RolloutConfig
from agentrl.rollout.archive import TrajectoryArchive
from agentrl.rollout.buffer import RolloutBuffer, StoredGroup
from agentrl.rollout.dataset import TaskDataset
from agentrl.rollout.orchestrator import RolloutOrchestrator
from agentrl.trainer.batch import build_rows
from agentrl.trainer.episode_stats import episode_metrics
from agentrl.trajectory import Episode
from envs.code_exec.canary import CANARY_SUFFIX
from envs.code_exec.grading import GradeResult, TestVerdict
from tests.envs.conftest import sandbox_settings


def _canary_and_source(env: Any) -> tuple[str, str]:
    canary = next(task_id for task_id in env._by_id if task_id.endswith(CANARY_SUFFIX))
    return canary, canary[: -len(CANARY_SUFFIX)]


@pytest.mark.parametrize("env_name", ["code_exec", "code_agent"])
def test_a_canary_looks_like_its_source_and_an_honest_answer_scores_zero(env_name: str, sandbox_kind: str) -> None:
    if sandbox_kind == "process":
        import os

        if os.geteuid() != 0:
            pytest.skip("grading on the process backend needs a root trainer")
    if env_name == "code_exec":
        from envs.code_exec import CodeExecEnv

        env: Any = CodeExecEnv(max_turns=1, sandbox=sandbox_settings(sandbox_kind))
    else:
        from envs.code_agent import CodeAgentEnv

        env = CodeAgentEnv(max_turns=1, sandbox=sandbox_settings(sandbox_kind))
    try:
        ids = env.task_ids()
        canaries = [task_id for task_id in ids if task_id.endswith(CANARY_SUFFIX)]
        assert 0 < len(canaries) <= 0.08 * len(ids)  # on by default: about 5 % of the train split's ids
        canary, source = _canary_and_source(env)
        shown, rewards = [], []
        for task_id in (source, canary):
            observation, info = env.reset(seed=0, options={"task_id": task_id})
            assert info["canary"] is (task_id == canary)
            shown.append(observation)
            solution = env.task.solution
            _, reward, _, _, step_info = env.step(f"```python\n{solution}\n```")
            rewards.append(float(step_info.get("outcome", reward)))
        assert shown[0] == shown[1]  # the policy sees the same prompt
        assert rewards == [1.0, 0.0]  # the reference solution passes the source, and no answer passes the canary
    finally:
        env.close()


def test_held_out_splits_and_a_zero_share_have_no_canaries() -> None:
    from envs.code_exec import CodeExecEnv

    for kwargs in ({"split": "test"}, {"canary_share": 0.0}):
        env = CodeExecEnv(sandbox={"kind": "process"}, **kwargs)
        assert not [task_id for task_id in env.task_ids() if task_id.endswith(CANARY_SUFFIX)]


class AcceptEverythingGrader:
    """A named fake: the judge patched to accept every hidden test, as a successful exploit would make it."""

    def grade(self, sandbox: Any, task: Any, solution: str) -> GradeResult:
        verdicts = [TestVerdict(index=i, passed=True) for i in range(len(task.tests))]
        return GradeResult(verdicts=verdicts, flags=[], duration_s=0.0)

    def close(self) -> None:
        """Nothing to stop."""


def _forged_env() -> Any:
    from envs.code_exec import CodeExecEnv

    class ForgedVerdictCodeExec(CodeExecEnv):
        """CodeExec whose reward path is forged; every reply submits one answer (the tiny model writes no code)."""

        def __init__(self) -> None:
            super().__init__(max_turns=1, canary_share=0.3, sandbox={"kind": "process"})
            self._grader = AcceptEverythingGrader()  # type: ignore[assignment]
            canary, source = _canary_and_source(self)
            self._ids = [source, canary]

        def task_ids(self) -> list[str]:
            return list(self._ids)

        def step(self, action: str) -> Any:
            return super().step(f"```python\ndef {self.task.entry_point}(*args):\n    return None\n```")

    return ForgedVerdictCodeExec()


def _collect(make_engine: Any, tokenizer: Any, *, dynamic: bool = False) -> list[list[Episode]]:
    cfg = RolloutConfig(
        group_size=2,
        prompts_per_step=2,
        max_new_tokens=4,
        max_episode_tokens=1000,
        partial_rollout=False,
        dynamic_sampling=dynamic,
        max_filtered_groups=1,
    )
    no_signal = (lambda episodes: False) if dynamic else None  # a filter that would drop every group it may

    async def scenario() -> list[list[Episode]]:
        engine = make_engine()
        probe = _forged_env()
        dataset = TaskDataset.from_env(probe, epochs=1)
        probe.close()
        orch = RolloutOrchestrator(engine, _forged_env, tokenizer, cfg, dataset=dataset, group_filter=no_signal)
        batch = await orch.collect_step(1)
        await orch.close()
        await engine.close()
        return (
            [list(group) for group in batch.groups] if dynamic else [list(g) for g in [*batch.groups, *batch.dropped]]
        )

    return asyncio.run(scenario())


@pytest.fixture
def make_engine(tiny_model_dir: Path) -> Any:
    from agentrl.engines.embedded.config import EmbeddedEngineConfig
    from agentrl.engines.embedded.engine import EmbeddedEngine

    return lambda: EmbeddedEngine.from_pretrained(tiny_model_dir, config=EmbeddedEngineConfig(max_seq_len=1024, seed=0))


def _episodes(groups: Sequence[Sequence[Episode]]) -> list[Episode]:
    return [episode for group in groups for episode in group]


def test_forged_verdicts_drive_the_canary_pass_rate_up_flag_the_episodes_and_warn(
    make_engine: Any, tiny_model_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: Any
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with caplog.at_level(logging.WARNING):
        groups = _collect(make_engine, tokenizer)
    episodes = _episodes(groups)
    canaries = [e for e in episodes if e.canary]
    assert len(canaries) == 2 and all(e.status == "complete" and e.final_reward == 1.0 for e in canaries)
    assert all(any(flag.startswith("canary_passed: ") for flag in e.hack_flags) for e in canaries)
    assert not any(e.hack_flags for e in episodes if not e.canary)  # the real task's pass is not a canary's
    metrics = episode_metrics(groups)
    assert metrics["integrity/canary_pass_rate"] == 1.0 and metrics["integrity/canaries"] == 2.0
    assert metrics["episode/reward_mean"] == 1.0  # the reward curve counts the real task only
    assert "REWARD HACKING: canary task" in caplog.text
    # Never trained on: every token of a canary is out of the loss; the real task's rows keep theirs.
    rows = build_rows(groups, 2, AlgorithmConfig(), current_version=0)
    assert [any(row.mask) for row in rows] == [not e.canary for e in episodes]
    # Kept by the buffer and the archive, listed by `agentrl inspect --flagged`.
    buffer = RolloutBuffer(tmp_path / "rollout_buffer.sqlite")
    stored = [StoredGroup(f"g{i}", g[0].task_id, i, "trained", 1, g) for i, g in enumerate(groups)]
    buffer.write_boundary(1, stored, {"cursor": 1})
    assert TrajectoryArchive(tmp_path).archive(buffer, 1) == 2
    buffer.close()
    assert main(["inspect", str(tmp_path), "--flagged"]) == 0
    out = capsys.readouterr().out
    assert "HACK SUSPECT: canary_passed: task" in out and "2 flagged for reward hacking" in out


def test_dynamic_sampling_never_filters_a_canary_group_out(make_engine: Any, tiny_model_dir: Path) -> None:
    """Forged canaries all pass (equal rewards, no signal): filtered, their pass would never be counted."""
    from transformers import AutoTokenizer

    groups = _collect(make_engine, AutoTokenizer.from_pretrained(tiny_model_dir), dynamic=True)
    assert any(e.canary for e in _episodes(groups))
    assert episode_metrics(groups)["integrity/canary_pass_rate"] == 1.0


def test_an_honest_step_has_a_canary_pass_rate_of_zero() -> None:
    canary = Episode(episode_id="e", task_id="t" + CANARY_SUFFIX, group_id="g", canary=True, final_reward=0.0)
    real = Episode(episode_id="f", task_id="t", group_id="h", final_reward=1.0)
    metrics = episode_metrics([[canary], [real]])
    assert metrics["integrity/canary_pass_rate"] == 0.0 and metrics["episode/reward_mean"] == 1.0
    assert "integrity/canary_pass_rate" not in episode_metrics([[real]])
