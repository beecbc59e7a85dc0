"""pass@k: the estimator against hand values and enumeration; the eval driver and CLI with a real engine."""

from __future__ import annotations

import asyncio
import itertools
import json
from math import comb
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from agentrl.cli.main import main
from agentrl.config.sections import RolloutConfig
from agentrl.engines.embedded.config import EmbeddedEngineConfig
from agentrl.engines.embedded.engine import EmbeddedEngine
from agentrl.env import MultiTurnEnv, user
from agentrl.env.registry import register_env
from agentrl.errors import ConfigError
from agentrl.evaluation import TaskResult, evaluate, pass_at_k, summarize
from agentrl.trajectory import Episode


def test_pass_at_k_hand_values() -> None:
    assert pass_at_k(4, 0, 1) == 0.0
    assert pass_at_k(4, 4, 4) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - comb(3, 2) / comb(5, 2))  # 0.7
    assert pass_at_k(10, 8, 3) == 1.0  # fewer than k failures: every k-subset has a success


def test_pass_at_k_matches_subset_enumeration() -> None:
    flags = [True, False, False, True, False, False]
    for k in range(1, len(flags) + 1):
        subsets = list(itertools.combinations(flags, k))
        expected = sum(any(s) for s in subsets) / len(subsets)
        assert pass_at_k(len(flags), sum(flags), k) == pytest.approx(expected)


def test_summary_averages_tasks_and_checks_k() -> None:
    results = [TaskResult("a", [True, True], [1.0, 1.0]), TaskResult("b", [False, True], [0.0, 1.0])]
    report = summarize(results, [1, 2], samples=2)
    assert report.pass_at_k == {"1": pytest.approx(0.75), "2": 1.0}
    assert report.mean_reward == pytest.approx(0.75)
    with pytest.raises(ConfigError, match="at least 5 samples"):
        summarize(results, [5], samples=2)
    with pytest.raises(ConfigError):
        pass_at_k(2, 3, 1)


class Oracle(MultiTurnEnv):
    """Success is decided by the task id (win-*/lose-*), whatever the model writes: pass@k is known exactly."""

    max_turns = 2

    def __init__(self, num_tasks: int = 3) -> None:
        self.ids = [f"win-{i}" for i in range(num_tasks)] + [f"lose-{i}" for i in range(num_tasks)]
        self.task_id = self.ids[0]
        self.closed = False

    def task_ids(self) -> list[str]:
        return list(self.ids)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        super().reset(seed=seed)
        self.task_id = (options or {}).get("task_id", self.ids[0])
        return [user(f"Say anything about {self.task_id}.")], {}

    def step(self, action: str) -> tuple[list[dict[str, Any]], float, bool, bool, dict[str, Any]]:
        win = self.task_id.startswith("win")
        return [], float(win), True, False, {"success": win, "reward_components": {"oracle": float(win)}}


def test_evaluate_runs_real_engine_episodes(tiny_model_dir: Path) -> None:
    engine = EmbeddedEngine.from_pretrained(tiny_model_dir, config=EmbeddedEngineConfig(max_seq_len=512))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    made: list[Oracle] = []

    def factory() -> Oracle:
        made.append(Oracle(num_tasks=2))
        return made[-1]

    seen: list[Episode] = []
    config = RolloutConfig(max_new_tokens=4, max_episode_tokens=256, temperature=1.0)
    report = asyncio.run(
        evaluate(engine, factory, tokenizer, config, samples=2, ks=[1, 2], concurrency=3, on_episode=seen.append)
    )
    asyncio.run(engine.close())
    assert report.pass_at_k == {
        "1": pytest.approx(0.5),
        "2": pytest.approx(0.5),
    } and report.mean_reward == pytest.approx(0.5)
    assert report.num_tasks == 4 and len(seen) == 8 and report.failed_episodes == 0
    assert all(e.segment.num_sampled > 0 and e.status == "complete" for e in seen)  # the engine really sampled
    assert len(made) == 3  # envs are reused across episodes, one per concurrent slot


def test_eval_cli_writes_a_report(tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    register_env("test/Oracle-v0", entry_point=Oracle)
    config = tmp_path / "eval.yaml"
    config.write_text(
        f"model: {{path: {tiny_model_dir}}}\nenv: "
        f"{{id: test/Oracle-v0, kwargs: {{num_tasks: 2}}, import_modules: []}}\n"
        "rollout: {max_new_tokens: 4, max_episode_tokens: 256}\nengine: {max_seq_len: 512}\n"
    )
    out = tmp_path / "report.json"
    code = main(["eval", str(config), "env.kwargs.num_tasks=1", "--samples", "2", "--k", "1,2", "--out", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["num_tasks"] == 2 and report["pass_at_k"] == {"1": 0.5, "2": 0.5}
    assert "pass@1 0.500" in capsys.readouterr().out
    assert main(["eval", str(config), "--samples", "1", "--k", "2"]) == 2  # k > samples: a clean error


def test_eval_cli_decodes_greedily_at_temperature_zero(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--temperature 0`` is the held-out evaluation's greedy decoding (rollout.temperature must stay > 0)."""
    import agentrl.evaluation as evaluation

    register_env("test/Oracle-v0", entry_point=Oracle)
    config = tmp_path / "eval.yaml"
    config.write_text(
        f"model: {{path: {tiny_model_dir}}}\n"
        "env: {id: test/Oracle-v0, kwargs: {num_tasks: 1}, import_modules: []}\n"
        "rollout: {max_new_tokens: 8, max_episode_tokens: 256, temperature: 1.0}\nengine: {max_seq_len: 512}\n"
    )
    completions: list[tuple[str, tuple[int, ...]]] = []
    real_evaluate = evaluation.evaluate

    async def recording(*args: Any, **kwargs: Any) -> Any:
        kwargs["on_episode"] = lambda ep: completions.append((ep.task_id, tuple(ep.segments[0].completion_ids)))
        return await real_evaluate(*args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate", recording)
    out = tmp_path / "greedy.json"
    assert main(["eval", str(config), "--samples", "3", "--temperature", "0", "--out", str(out)]) == 0
    assert len(completions) == 6 and len(set(completions)) == 2  # one greedy answer per task
    completions.clear()
    assert main(["eval", str(config), "--samples", "3", "--out", str(out)]) == 0  # rollout.temperature: 1.0
    assert len(set(completions)) > 2
    assert main(["eval", str(config), "--temperature", "-0.5"]) == 2
