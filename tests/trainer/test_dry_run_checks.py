"""``agentrl train --dry-run`` checks beyond the model, engine and one training turn: the evaluation envs."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.cli.main import main
from agentrl.errors import PreflightError
from agentrl.job.loader import load_config
from agentrl.trainer.dry_run_checks import check_eval_splits

ROOT = Path(__file__).resolve().parents[2]

SPLIT_ENVS = '''
"""Two envs with held-out splits: one keeps them in a dict, one types its split as a Literal."""
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentrl.env import MultiTurnEnv, user

QUESTIONS = {"train": ["q0", "q1"], "test_instances": ["q2"]}


class DictSplits(MultiTurnEnv):
    """Splits in a dict: an unknown one raises KeyError."""

    def __init__(self, split: str = "train") -> None:
        self.questions = QUESTIONS[split]

    def task_ids(self) -> list[str]:
        return list(self.questions)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return [user("?")], {"task_id": self.choose_task_id(options, self.task_ids(), "DictSplits")}

    def step(self, action):
        return [], 0.0, True, False, {}


class TypedSplitsConfig(BaseModel):
    """Kwargs of TypedSplits."""

    split: Literal["train", "test_instances"] = Field("train", description="Task split.")


class TypedSplits(DictSplits):
    """Splits typed as a Literal."""

    config_model = TypedSplitsConfig

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(TypedSplitsConfig(**kwargs).split)
'''


def _cfg(tmp_path: Path, model_dir: Path, env_id: str, splits: str):
    (tmp_path / "split_envs.py").write_text(SPLIT_ENVS, encoding="utf-8")
    overrides = [f"model.path={model_dir}", f"env.id={env_id}", "env.kwargs={}", f"eval.splits={splits}"]
    return load_config(ROOT / "configs" / "tiny_debug.yaml", [*overrides, f"logging.run_root={tmp_path}"])


def test_a_typo_in_eval_splits_fails_the_dry_run_naming_the_split(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    good = _cfg(tmp_path, tiny_model_dir, "split_envs:DictSplits", "[test_instances]")
    assert check_eval_splits(good) == ["eval split 'test_instances': env built, 1 tasks"]
    bad = _cfg(tmp_path, tiny_model_dir, "split_envs:DictSplits", "[test_instance]")
    with pytest.raises(PreflightError, match=r"eval.splits: env split_envs:DictSplits with split 'test_instance' "):
        check_eval_splits(bad)
    typed = _cfg(tmp_path, tiny_model_dir, "split_envs:TypedSplits", "[test_instance]")
    with pytest.raises(PreflightError, match="the env's splits are train, test_instances. Fix eval.splits"):
        check_eval_splits(typed)


def test_the_dry_run_builds_the_evaluation_envs(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "split_envs.py").write_text(SPLIT_ENVS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = str(ROOT / "configs" / "tiny_debug.yaml")
    args = ["train", config, f"model.path={tiny_model_dir}", "env.id=split_envs:DictSplits", "env.kwargs={}"]
    assert main([*args, "eval.splits=[test_instance]", "--dry-run"]) == 2
    assert "with split 'test_instance' could not be built (KeyError: 'test_instance')" in capsys.readouterr().err
    assert main([*args, "eval.splits=[test_instances]", "--dry-run"]) == 0
    assert "ok: eval split 'test_instances': env built, 1 tasks" in capsys.readouterr().out


def test_the_defaults_are_the_bundled_configs_and_a_clipping_combination_is_warned_of(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentrl.trainer.dry_run_checks import clip_risk_warnings

    quickstart = load_config(ROOT / "configs" / "quickstart.yaml", [f"model.path={tiny_model_dir}"])
    plain = load_config(
        ROOT / "configs" / "tiny_debug.yaml", [f"model.path={tiny_model_dir}", "rollout.partial_rollout=true"]
    )
    assert plain.algorithm.proximal is None and plain.algorithm.is_correction is None  # nothing set: the defaults
    assert plain.algorithm.off_policy == quickstart.algorithm.off_policy  # ... are what the project trains with
    assert clip_risk_warnings(plain) == [] and clip_risk_warnings(quickstart) == []
    behaviour = plain.model_copy(update={"algorithm": plain.algorithm.model_copy(update={"proximal": "behaviour"})})
    (warning,) = clip_risk_warnings(behaviour)
    assert warning.startswith("warning: proximal 'behaviour' with stale samples") and "recompute_stale" in warning
    bf16 = behaviour.model_copy(update={"rollout": behaviour.rollout.model_copy(update={"partial_rollout": False})})
    bf16 = bf16.model_copy(update={"model": bf16.model.model_copy(update={"dtype": "bfloat16"})})
    (warning,) = clip_risk_warnings(bf16)
    assert "does not compute what the update does" in warning
    config = str(ROOT / "configs" / "tiny_debug.yaml")
    args = ["train", config, f"model.path={tiny_model_dir}", f"logging.run_root={tmp_path}", "--dry-run"]
    assert main([*args, "rollout.partial_rollout=true", "algorithm.proximal=behaviour"]) == 0
    assert "[train] warning: proximal 'behaviour' with stale samples" in capsys.readouterr().out
    assert main([*args, "rollout.partial_rollout=true"]) == 0
    assert "warning: proximal" not in capsys.readouterr().out


def test_the_first_step_says_when_the_loss_clipped_most_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentrl.config.sections import LoggingConfig
    from agentrl.trainer.reporting import RunReporter

    cfg = LoggingConfig(run_root=str(tmp_path), progress=False, wandb_mode="disabled", plot_every=100)
    config = {"algorithm": {"proximal": "behaviour"}}
    reporter = RunReporter(tmp_path, cfg, 3, config=config)
    reporter.log(1, {"train/clip_frac_token": 0.333, "train/optimizer_steps": 1.0}, plot=False)
    reporter.log(2, {"train/clip_frac_token": 0.333, "train/optimizer_steps": 1.0}, plot=False)
    out = capsys.readouterr().out
    assert out.count("clipped 33% of the trained tokens") == 1  # once, at the job's first step
    assert "warning: step 1 clipped 33% of the trained tokens (train/clip_frac_token, proximal 'behaviour')" in out
    assert "set algorithm.proximal: recompute_stale" in out
    quiet = RunReporter(tmp_path, cfg, 3, config={"algorithm": {}})
    quiet.log(1, {"train/clip_frac_token": 0.02, "train/optimizer_steps": 1.0}, plot=False)
    assert "clipped" not in capsys.readouterr().out


def test_a_step_that_raises_in_the_dry_run_is_named_with_its_file_and_line(tmp_path: Path) -> None:
    from agentrl.env.contract import CANNED_ACTION, probe_turn
    from agentrl.errors import EnvContractError

    (tmp_path / "raising_env.py").write_text(
        "from agentrl.env import MultiTurnEnv, user\n\n\n"
        "class Raising(MultiTurnEnv):\n"
        '    """Its step looks a room up that is not there."""\n\n'
        "    def reset(self, *, seed=None, options=None):\n"
        "        super().reset(seed=seed)\n"
        '        return [user("go")], {}\n\n'
        "    def step(self, action):\n"
        '        return {"hall": 1}["cellar"]\n'
    )
    import importlib.util

    spec = importlib.util.spec_from_file_location("raising_env", tmp_path / "raising_env.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    with pytest.raises(EnvContractError) as caught:
        probe_turn(module.Raising(), "t0", 0)
    where = f'File "{tmp_path / "raising_env.py"}", line 12, in step'
    assert f"Raising.step({CANNED_ACTION!r}) raised KeyError: 'cellar' ({where})" in str(caught.value)
