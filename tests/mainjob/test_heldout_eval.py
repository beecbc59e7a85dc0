"""The main job's pieces: held-out evaluation before/after training in ``agentrl train``, and the quickstart config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrl.job.loader import load_config
from agentrl.trainer.heldout import gain_metrics, paired_gain, summary_lines

ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, model_dir: Path, eval_section: dict[str, Any]) -> Path:
    data: dict[str, Any] = {
        "model": {"path": str(model_dir), "device": "cpu"},
        "engine": {"kind": "embedded", "max_batch_size": 8, "max_seq_len": 512},
        "env": {
            "id": "agentrl/CodeExec-v0",
            "kwargs": {"tasks": "easy", "max_turns": 1, "sandbox": {"kind": "process"}},
        },
        "rollout": {
            "group_size": 2,
            "prompts_per_step": 1,
            "partial_rollout": False,
            "max_new_tokens": 8,
            "max_episode_tokens": 256,
            "stop": ["\n```\n"],
        },
        "algorithm": {"loss": "gspo_token"},
        "trainer": {
            "steps": 1,
            "lr": 1e-3,
            "mini_batches": 1,
            "checkpoint_every_steps": 1,
            "gradient_checkpointing": False,
        },
        "logging": {"run_root": str(tmp_path / "runs"), "wandb_mode": "disabled", "progress": False},
        "eval": eval_section,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_quickstart_config_evaluates_held_out_kinds_and_instances() -> None:
    cfg = load_config(ROOT / "configs" / "quickstart.yaml", [])
    assert cfg.eval.splits == ["test_kinds", "test_instances"]
    assert cfg.algorithm.loss.kind == "gspo_token" and cfg.algorithm.old_logprobs == "engine"
    assert cfg.rollout.partial_rollout
    assert "```\n" not in cfg.rollout.stop  # it would also stop at an untagged opening fence


def test_quickstart_trains_the_multi_turn_agent_with_per_turn_credit() -> None:
    from envs.code_agent.config import CodeAgentConfig
    from envs.code_tasks import generate_tasks

    cfg = load_config(ROOT / "configs" / "quickstart.yaml", [])
    assert cfg.env.id == "agentrl/CodeAgent-v0"
    env = CodeAgentConfig.model_validate(cfg.env.kwargs)
    assert env.max_turns == 3 and cfg.rollout.max_new_tokens == 160
    assert cfg.algorithm.turn_advantage.kind == "outcome_plus_turn" and cfg.algorithm.turn_advantage.lam <= 1.0
    assert cfg.rollout.prompts_per_step >= 6 and cfg.rollout.group_size >= 4  # ~10 % success needs >= 24 episodes
    # every held-out task, greedy: tasks set the noise, and a deterministic evaluation has no sampling noise
    assert cfg.eval.max_tasks is None and cfg.eval.temperature == 0.0 and cfg.eval.samples == 1
    kinds, instances = (generate_tasks(env.tasks, split) for split in ("test_kinds", "test_instances"))
    assert {t.task_id.split("/")[1] for t in kinds} == set(env.tasks.heldout_families)
    assert len(instances) >= 20 and len(kinds) >= 12
    trained = {t.task_id.split("/")[1] for t in instances}
    assert trained == set(env.tasks.families or ()) - set(env.tasks.heldout_families)  # every trained family


def test_single_turn_quickstart_stays_the_faster_alternative() -> None:
    cfg = load_config(ROOT / "configs" / "quickstart_single.yaml", [])
    assert cfg.env.id == "agentrl/CodeExec-v0" and cfg.env.kwargs["max_turns"] == 1
    assert cfg.eval.splits == ["test_kinds", "test_instances"] and cfg.rollout.partial_rollout


def test_summary_lines_compare_before_and_after() -> None:
    before = {"eval/test_kinds/pass@1": 0.25, "eval/test_kinds/reward_mean": 0.4}
    after = {"eval/test_kinds/pass@1": 0.5, "eval/test_kinds/reward_mean": 0.6, "eval/other/pass@1": 1.0}
    assert summary_lines(before, after) == ["held-out test_kinds pass@1: 0.25 -> 0.50 (+0.25)"]
    after.update({"eval/test_kinds/gain_lo": -0.125, "eval/test_kinds/gain_hi": 0.625, "eval/test_kinds/gain_tasks": 3})
    assert summary_lines(before, after) == [
        "held-out test_kinds pass@1: 0.25 -> 0.50 (+0.25, 95 % interval over 3 tasks [-0.12, +0.62])"
    ]


def _report(path: Path, successes: dict[str, list[bool]]) -> None:
    tasks = [
        {"task_id": task, "successes": s, "rewards": [float(x) for x in s], "errors": []}
        for task, s in successes.items()
    ]
    path.write_text(json.dumps({"tasks": tasks}))


def test_paired_gain_is_a_t_interval_over_tasks_of_the_per_task_change(tmp_path: Path) -> None:
    assert paired_gain(tmp_path, "test_kinds") is None  # nothing evaluated yet
    _report(tmp_path / "eval-before-test_kinds.json", {"a": [False, False], "b": [True, True], "c": [True, False]})
    assert paired_gain(tmp_path, "test_kinds") is None  # no evaluation after training
    # d was not evaluated before (another task set): it is not paired and does not count
    after = {"a": [True, True], "b": [True, False], "c": [True, False], "d": [True, True]}
    _report(tmp_path / "eval-after-test_kinds.json", after)
    gain = paired_gain(tmp_path, "test_kinds")
    assert gain is not None and gain["n"] == 3
    diffs = [1.0, -0.5, 0.0]  # per task: after minus before
    mean = sum(diffs) / 3
    sd = (sum((d - mean) ** 2 for d in diffs) / 2) ** 0.5
    assert gain["mean"] == pytest.approx(mean)
    assert (gain["lo"], gain["hi"]) == pytest.approx((mean - 4.303 * sd / 3**0.5, mean + 4.303 * sd / 3**0.5))
    metrics = gain_metrics(gain, "test_kinds")
    assert metrics["eval/test_kinds/gain_tasks"] == 3.0 and metrics["eval/test_kinds/gain_lo"] == gain["lo"]
    assert gain_metrics(None, "test_kinds") == {}


@pytest.mark.slow
def test_train_evaluates_held_out_splits_before_and_after(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentrl.trainer.loop import train

    cfg_path = _config(
        tmp_path, tiny_model_dir, {"splits": ["test_kinds"], "samples": 2, "max_tasks": 2, "temperature": 1.0}
    )
    run_dir = train(load_config(cfg_path, ["logging.run_name=heldout"]), config_name="run")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval/test_kinds/pass@1" in r]
    assert [r["step"] for r in evals] == [0, 1]  # before the first step and after the last one
    for phase in ("before", "after"):
        report = json.loads((run_dir / f"eval-{phase}-test_kinds.json").read_text())
        assert report["num_tasks"] == 2 and report["samples"] == 2
        assert all(task["task_id"].split("/")[1] in ("conditionals", "sets") for task in report["tasks"])
    assert "held-out test_kinds pass@1:" in capsys.readouterr().out
    assert evals[1]["eval/test_kinds/gain_tasks"] == 2.0  # the after record carries the paired gain
    assert evals[1]["eval/test_kinds/gain"] == pytest.approx(
        evals[1]["eval/test_kinds/pass@1"] - evals[0]["eval/test_kinds/pass@1"]
    )


@pytest.mark.slow
def test_eval_every_steps_logs_a_learning_curve(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agentrl.trainer.loop import train

    section = {"splits": ["test_kinds"], "samples": 1, "max_tasks": 1, "every_steps": 2}
    run_dir = train(
        load_config(_config(tmp_path, tiny_model_dir, section), ["logging.run_name=curve", "trainer.steps=5"]),
        config_name="run",
    )
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "eval/test_kinds/pass@1" in r] == [0, 2, 4, 5]  # before, every 2nd, after
    assert sorted(p.name for p in run_dir.glob("eval-*.json")) == [
        "eval-after-test_kinds.json",
        "eval-before-test_kinds.json",
        "eval-step0002-test_kinds.json",
        "eval-step0004-test_kinds.json",
    ]


@pytest.mark.slow
def test_train_without_eval_splits_logs_no_eval_records(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agentrl.trainer.loop import train

    run_dir = train(load_config(_config(tmp_path, tiny_model_dir, {}), ["logging.run_name=noeval"]), config_name="run")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1]
    assert not list(run_dir.glob("eval-*.json"))


class _Recorder:
    """Delegates to a real engine and records every sampled output (a recorder, not a fake)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.outputs = inner, []
        self.semantics = inner.semantics

    @property
    def weight_version(self) -> int:
        return self.inner.weight_version

    async def generate(self, input_ids: list[int], sampling: Any, request_id: str | None = None) -> Any:
        result = await self.inner.generate(input_ids, sampling, request_id)
        self.outputs.append((tuple(input_ids), tuple(result.output_ids)))
        return result

    async def abort(self, request_ids: list[str] | None = None) -> None:
        await self.inner.abort(request_ids)


def test_before_and_after_evaluations_are_paired(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The same policy evaluated twice at T=1 samples the same answers (common random numbers)."""
    import asyncio

    from agentrl.engines.factory import make_engine
    from agentrl.models.loading import load_tokenizer
    from agentrl.trainer.heldout import evaluate_split

    cfg = load_config(
        _config(tmp_path, tiny_model_dir, {"splits": ["test_kinds"], "samples": 2, "max_tasks": 2, "temperature": 1.0}),
        [],
    )
    tokenizer = load_tokenizer(tiny_model_dir)

    async def twice() -> list[list[Any]]:
        engine = make_engine(cfg.engine, cfg.model)
        try:
            runs = []
            for _ in range(2):
                recorder = _Recorder(engine)
                await evaluate_split(cfg, recorder, tokenizer, "test_kinds")
                runs.append(sorted(recorder.outputs))
            return runs
        finally:
            await engine.close()

    first, second = asyncio.run(twice())
    assert len(first) == 4 and len({out for _, out in first}) > 1  # 2 tasks x 2 samples, not all alike
    assert first == second


def test_per_split_settings_override_the_eval_defaults(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A split can be sampled (many episodes, T > 0) while the others stay greedy; bad entries are refused."""
    import asyncio

    from agentrl.engines.factory import make_engine
    from agentrl.errors import ConfigError
    from agentrl.models.loading import load_tokenizer
    from agentrl.trainer.heldout import evaluate_split

    section = {"splits": ["test_kinds", "test_instances"], "max_tasks": 2, "per_split": {"test_kinds": {"samples": 3}}}
    with pytest.raises(ConfigError, match="3 greedy samples per task"):
        load_config(_config(tmp_path, tiny_model_dir, section), [])
    section["per_split"] = {"test_kinds": {"samples": 3, "temperature": 1.0}, "test": {"samples": 2}}
    with pytest.raises(ConfigError, match=r"names \['test'\], which eval.splits"):
        load_config(_config(tmp_path, tiny_model_dir, section), [])
    off = load_config(_config(tmp_path, tiny_model_dir, section), ["eval.splits=[]"])  # evaluation off: no error
    assert off.eval.splits == []
    del section["per_split"]["test"]
    cfg = load_config(_config(tmp_path, tiny_model_dir, section), [])
    assert (cfg.eval.samples_for("test_kinds"), cfg.eval.temperature_for("test_kinds")) == (3, 1.0)
    assert (cfg.eval.samples_for("test_instances"), cfg.eval.temperature_for("test_instances")) == (1, 0.0)

    async def both() -> tuple[Any, Any]:
        engine = make_engine(cfg.engine, cfg.model)
        try:
            tokenizer = load_tokenizer(tiny_model_dir)
            kinds = await evaluate_split(cfg, engine, tokenizer, "test_kinds")
            return kinds, await evaluate_split(cfg, engine, tokenizer, "test_instances")
        finally:
            await engine.close()

    kinds, instances = asyncio.run(both())
    assert kinds.samples == 3 and all(len(t.successes) == 3 for t in kinds.tasks)
    assert instances.samples == 1 and all(len(t.successes) == 1 for t in instances.tasks)
