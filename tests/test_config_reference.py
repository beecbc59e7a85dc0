"""docs/config-reference.md is generated from the config models and current; TRL/verl key names get agentrl's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from agentrl.config.foreign_names import FOREIGN_KEYS
from agentrl.errors import ConfigError
from agentrl.job.config_reference import config_reference
from agentrl.job.loader import load_config

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "config-reference.md"
TINY = ROOT / "configs" / "tiny_debug.yaml"


def _keys(model: BaseModel, prefix: str = "") -> list[str]:
    out = []
    for name in type(model).model_fields:
        key = f"{prefix}{name}"
        out.append(key)
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            out += _keys(value, key + ".")
    return out


def test_the_config_reference_is_current() -> None:
    assert PAGE.read_text(encoding="utf-8") == config_reference(), "run: python scripts/config_reference.py"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "config_reference.py"), "--check"])
    assert done.returncode == 0


@pytest.mark.parametrize("config", ["quickstart.yaml", "qwen3_1p7b_sglang.yaml", "tiny_debug.yaml"])
def test_every_key_of_a_bundled_config_is_in_the_reference(config: str, tmp_path: Path) -> None:
    page = PAGE.read_text(encoding="utf-8")
    cfg = load_config(ROOT / "configs" / config, [f"model.path={tmp_path}"], check_env=False)
    missing = [key for key in _keys(cfg) if f"| `{key}` |" not in page and f"\n## {key}" not in page]
    assert not missing
    assert "| `trainer.lr` | float | `1e-06` | AdamW learning rate. |" in page
    assert "## algorithm.loss (" in page and "## engine (" in page  # each variant's own keys


def test_trl_and_verl_names_are_answered_with_ours() -> None:
    page = PAGE.read_text(encoding="utf-8")
    stale = [name for name, (target, _) in FOREIGN_KEYS.items() if target and f"| `{target}` |" not in page]
    assert not stale  # each names a key of ours (a renamed key shows up here)
    with pytest.raises(ConfigError) as caught:
        load_config(
            TINY,
            [
                "learning_rate=1e-6",
                "rollout.num_generations=8",
                "algorithm.kl_coef=0.1",
                "rollout.max_completion_length=9",
            ],
        )
    text = str(caught.value)
    assert "learning_rate: unknown key (value 1e-06) -> That is TRL's learning_rate. Did you mean trainer.lr?" in text
    assert "Did you mean rollout.group_size?" in text and "Did you mean rollout.max_new_tokens?" in text
    assert "kl_coef: agentrl's losses have no KL penalty" in text
