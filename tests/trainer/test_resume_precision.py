"""A run records the precision its ``*_if_fast`` settings resolved to; a resume on a machine where they resolve
otherwise is a config difference, not a silent switch of the engine's dtype and the update's precision.

The two machines are one: a FAKE CPU without bf16 units for the resume (``has_fast_bf16`` monkeypatched where
the resolution reads it), after a start with a FAKE CPU that has them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import agentrl.models.precision
import agentrl.trainer.update
from agentrl.cli.main import build_parser
from agentrl.cli.train import load_run_config
from agentrl.errors import ConfigError
from agentrl.job.loader import load_config
from agentrl.trainer.resume import save_resolved_config
from agentrl.trainer.validate import RUN_META, write_run_meta

TINY = Path(__file__).resolve().parents[2] / "configs" / "tiny_debug.yaml"


def _cpu_with_bf16_units(monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    for module in (agentrl.models.precision, agentrl.trainer.update):
        monkeypatch.setattr(module, "has_fast_bf16", lambda device: fast)


def test_a_resume_that_would_switch_precision_is_a_config_difference(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = load_config(
        TINY,
        [
            f"model.path={tiny_model_dir}",
            "model.device=cpu",
            "model.dtype=bfloat16_if_fast",
            "trainer.precision=bfloat16_autocast_if_fast",
        ],
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _cpu_with_bf16_units(monkeypatch, True)
    save_resolved_config(run_dir, cfg)
    write_run_meta(run_dir, cfg)
    recorded = json.loads((run_dir / RUN_META).read_text())["precision"]
    assert recorded == {"model.dtype": "bfloat16", "trainer.precision": "bf16_autocast"}
    assert load_run_config(build_parser().parse_args(["train", "--resume", str(run_dir)])) == cfg  # same machine

    _cpu_with_bf16_units(monkeypatch, False)
    with pytest.raises(ConfigError) as info:
        load_run_config(build_parser().parse_args(["train", "--resume", str(run_dir)]))
    message = str(info.value)
    assert "model.dtype: resolved 'bfloat16' in the run, 'float32' now" in message
    assert "trainer.precision: resolved 'bf16_autocast' in the run, 'fp32' now" in message
    assert "--accept-config-changes" in message

    args = build_parser().parse_args(["train", "--resume", str(run_dir), "--accept-config-changes"])
    assert load_run_config(args) == cfg  # accepted: the run's record takes the new precision
    assert json.loads((run_dir / RUN_META).read_text())["precision"]["model.dtype"] == "float32"
    assert load_run_config(build_parser().parse_args(["train", "--resume", str(run_dir)])) == cfg
