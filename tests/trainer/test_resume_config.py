"""A run directory keeps its resolved config: ``agentrl train --resume RUN_DIR`` alone continues it, and a config
or overrides that differ from it are an error naming each difference unless ``--accept-config-changes``."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl.cli.main import build_parser
from agentrl.cli.train import load_run_config
from agentrl.errors import ConfigError
from agentrl.job.loader import load_config
from agentrl.trainer.resume import RESOLVED_CONFIG, resume_command, resume_config, save_resolved_config

TINY = Path(__file__).resolve().parents[2] / "configs" / "tiny_debug.yaml"


def _run_dir(tmp_path: Path, *overrides: str) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_resolved_config(run_dir, load_config(TINY, list(overrides)))
    return run_dir


def _args(*argv: str) -> object:
    return build_parser().parse_args(["train", *argv])


def test_resume_with_only_the_run_directory_continues_its_config(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, "trainer.steps=6", "rollout.group_size=2")
    assert (run_dir / RESOLVED_CONFIG).is_file()
    cfg = resume_config(run_dir, None)
    assert (cfg.trainer.steps, cfg.rollout.group_size) == (6, 2)
    assert cfg == load_config(TINY, ["trainer.steps=6", "rollout.group_size=2"])


def test_a_differing_config_on_resume_names_the_differences(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, "trainer.steps=6")
    with pytest.raises(ConfigError) as info:
        resume_config(run_dir, str(TINY))  # the original overrides forgotten: 40/6 before the fix
    message = str(info.value)
    assert "differs from the one the run was started with (config.yaml) in 1 key:" in message
    assert "  trainer.steps: 6 in the run, 3 now" in message
    assert f"Run `agentrl train --resume {run_dir}` alone" in message and "--accept-config-changes" in message
    with pytest.raises(ConfigError, match="trainer.lr: 0.02 in the run, 0.001 now"):
        resume_config(run_dir, None, ["trainer.lr=1e-3"])
    assert resume_config(run_dir, None, ["trainer.steps=9"], accept_changes=True).trainer.steps == 9
    assert resume_config(run_dir, str(TINY), ["trainer.steps=6"]).trainer.steps == 6  # the same config: fine


def test_the_train_command_reads_resume_alone_and_overrides_after_it(tmp_path: Path, tiny_model_dir: Path) -> None:
    from agentrl.trainer.validate import write_run_meta

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = load_config(TINY, [f"model.path={tiny_model_dir}", "trainer.steps=6"])
    save_resolved_config(run_dir, cfg)
    write_run_meta(run_dir, cfg)
    assert load_run_config(_args("--resume", str(run_dir))).trainer.steps == 6
    with pytest.raises(ConfigError, match="trainer.steps: 6 in the run, 8 now"):
        load_run_config(_args("--resume", str(run_dir), "trainer.steps=8"))
    accepted = load_run_config(_args("--resume", str(run_dir), "trainer.steps=8", "--accept-config-changes"))
    assert accepted.trainer.steps == 8
    (run_dir / RESOLVED_CONFIG).unlink()  # a run started before runs kept their config
    with pytest.raises(ConfigError, match="has no config.yaml .* pass the CONFIG file and overrides it was started"):
        load_run_config(_args("--resume", str(run_dir)))
    with pytest.raises(ConfigError, match="needs a CONFIG file"):
        load_run_config(_args())


def test_the_resume_hint_is_a_command_that_works() -> None:
    assert resume_command(Path("runs/x")) == "agentrl train --resume runs/x"
    import inspect

    from agentrl.trainer import loop

    assert "CONFIG --resume" not in inspect.getsource(loop)
