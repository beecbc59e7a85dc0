"""Run configs: every file in configs/ loads; overrides; every mistake reported at once with key, value and fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from agentrl.errors import ConfigError
from agentrl.job.loader import load_config, parse_yaml
from agentrl.job.run_config import RunConfig

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
TINY = Path(__file__).resolve().parents[1] / "configs" / "tiny_debug.yaml"


def test_configs_folder_is_not_empty() -> None:
    assert TINY in CONFIGS


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_config_file_loads(path: Path) -> None:
    config = load_config(path)
    assert isinstance(config, RunConfig) and config.model.path and config.env.id


def _all_models(model: type[BaseModel]) -> list[type[BaseModel]]:
    found = [model]
    for field in model.model_fields.values():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            found.extend(_all_models(field.annotation))
    return found


def test_every_config_field_is_documented() -> None:
    undocumented = [
        f"{m.__name__}.{name}"
        for m in _all_models(RunConfig)
        for name, f in m.model_fields.items()
        if not f.description
    ]
    assert undocumented == []


def test_dotted_overrides_are_parsed_as_yaml() -> None:
    config = load_config(
        TINY,
        [
            "trainer.lr=2e-6",
            "rollout.partial_rollout=true",
            'rollout.stop=["\\n\\n", END]',
            "env.kwargs.turns=3",
            "logging.run_name=my run",
        ],
    )
    assert config.trainer.lr == 2e-6 and isinstance(config.trainer.lr, float)
    assert config.rollout.partial_rollout is True
    assert config.rollout.stop == ["\n\n", "END"]
    assert config.env.kwargs["turns"] == 3 and config.logging.run_name == "my run"
    assert parse_yaml("1e-6") == 1e-6 and parse_yaml("-3.5E+2") == -350.0


def test_misspelt_key_names_the_key_and_suggests_the_fix() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(TINY, ["trainer.lrr=1e-6"])
    message = str(info.value)
    assert "trainer.lrr: unknown key (value 1e-06)" in message and "Did you mean 'lr'?" in message


def test_wrong_type_names_the_key_and_value() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(TINY, ["rollout.group_size=many"])
    message = str(info.value)
    assert "rollout.group_size: Input should be a valid integer" in message and "(got 'many')" in message
    assert "Episodes per task" in message  # the field's documentation is part of the fix


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(TINY, ["modle.path=x", "trainer.lr=-1", "engine.kind=tgi", "not-an-override", "model.path.sub=1"])
    message = str(info.value)
    assert "has 5 problems" in message
    for key in ("modle:", "trainer.lr:", "engine.kind:", "not-an-override:", "model.path.sub:"):
        assert f"  {key}" in message
    assert "Did you mean 'model'?" in message and "model.path is 'models/tiny', not a section" in message


def test_env_id_and_env_kwargs_are_checked_with_the_config() -> None:
    with pytest.raises(
        ConfigError, match=r"env.id: unknown environment id 'agentrl/MagicWrd-v0'. Did you mean 'agentrl/MagicWord-v0'"
    ):
        load_config(TINY, ["env.id=agentrl/MagicWrd-v0"])
    with pytest.raises(ConfigError, match=r"env.kwargs.wrd: unknown key \(value 'x'\) -> Did you mean 'word'"):
        load_config(TINY, ["env.kwargs.wrd=x"])
    assert load_config(TINY, ["env.id=agentrl/MagicWrd-v0"], check_env=False).env.id == "agentrl/MagicWrd-v0"


def test_cross_field_checks_say_what_to_set() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(
            TINY,
            [
                "engine.kind=sglang",
                "engine.max_batch_size=null",  # tiny_debug's embedded-only setting
                "rollout.max_new_tokens=300",
                "engine.max_seq_len=128",
                "trainer.mini_batches=9",
            ],
        )
    message = str(info.value)
    assert "engine.urls: engine.kind is 'sglang' but no server URL is given -> set engine.urls" in message
    assert "rollout.max_new_tokens: 300 leaves no room" in message
    assert "rollout.max_episode_tokens: 256 exceeds engine.max_seq_len=128" in message
    assert "trainer.mini_batches: 9 mini-batches but a step has only 8 episodes" in message


def test_missing_sections_and_files_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model: required key is missing"):
        load_config(None, ["env.id=agentrl/MagicWord-v0"])
    with pytest.raises(ConfigError, match="config file 'nope.yaml' does not exist"):
        load_config("nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  path: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML at line 3"):
        load_config(bad)
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="must hold a mapping of sections"):
        load_config(listing)


def test_training_checks_run_for_every_command_and_are_reported_together() -> None:
    """load_config (agentrl train, rollout, eval, --dry-run) runs every cross-field check, the plug-ins' too."""
    with pytest.raises(ConfigError) as info:
        load_config(
            TINY,
            [
                "rollout.group_size=3",
                "trainer.mini_batches=4",
                "rollout.staleness_policy=mask",
                "algorithm.loss=gspo",
                "algorithm.turn_advantage=discounted_return",
                "algorithm.adv_scale=none",
            ],
        )
    message = str(info.value)
    assert "has 4 problems" in message
    assert (
        "  trainer.mini_batches: a step's 6 episodes (rollout.group_size=3 x rollout.prompts_per_step=2) do " in message
    )
    assert "  algorithm.max_token_lag: rollout.staleness_policy is 'mask' but no lag bound is set" in message
    assert (
        "  algorithm.turn_advantage: 'discounted_return' gives per-turn advantages, but loss 'gspo' takes one "
        "advantage per sequence -> use algorithm.loss: gspo_token" in message
    )
    assert "  algorithm.adv_scale: adv_scale 'none' is not implemented by turn_advantage 'discounted_return'" in message
    with pytest.raises(ConfigError, match="group_size 1 gives every episode advantage 0"):
        load_config(TINY, ["rollout.group_size=1"])


def test_plugin_names_and_settings_errors_name_the_key_and_the_fix() -> None:
    def problems(*overrides: str) -> str:
        with pytest.raises(ConfigError) as info:
            load_config(TINY, list(overrides))
        return str(info.value)

    assert (
        "  algorithm.loss: unknown policy loss 'gspo_tokn'. Did you mean 'gspo_token'? -> choose one of grpo, gspo, "
        "gspo_token, or register yours with agentrl.algos.register_loss" in problems("algorithm.loss=gspo_tokn")
    )
    assert "  algorithm.turn_advantage: unknown advantage scheme 'outcom'. Did you mean 'outcome'?" in problems(
        "algorithm.turn_advantage=outcom"
    )
    assert "algorithm.loss.eps_lw: unknown key (value 0.1) -> Did you mean 'eps_low'?" in problems(
        "algorithm.loss.eps_lw=0.1"
    )
    assert "algorithm.loss.eps_low: eps_low=1.0 must lie in (0, 1)" in problems("algorithm.loss.eps_low=1.0")
    assert "grpo has no sequence log-ratio to clamp" in problems(
        "algorithm.loss=grpo", "algorithm.loss.log_ratio_clamp=12"
    )
    assert "gamma is a setting of discounted_return, not of outcome" in problems("algorithm.turn_advantage.gamma=0.9")
    assert "old_logprobs 'recompute' already replaces them" in problems(
        "algorithm.audit_every=5", "algorithm.old_logprobs=recompute"
    )


def test_plugin_settings_take_dotted_overrides_and_survive_a_dump() -> None:
    config = load_config(TINY, ["algorithm.loss.eps_high=0.001", "algorithm.turn_advantage.kind=discounted_return"])
    assert config.algorithm.loss.kind == "gspo_token" and config.algorithm.loss.eps_high == 0.001  # type: ignore[attr-defined]
    config = load_config(TINY, ["algorithm.turn_advantage={kind: discounted_return, gamma: 0.9}"])
    dumped = config.model_dump(mode="json")
    assert dumped["algorithm"]["turn_advantage"] == {
        "kind": "discounted_return",
        "gamma": 0.9,
        "episode_weight": 0.0,
        "step_weight": 1.0,
    }
    assert RunConfig.model_validate(dumped) == config  # what a checkpoint or wandb records loads back


def test_every_plugin_setting_is_documented() -> None:
    from agentrl.algos import LOSSES, SCHEMES

    undocumented = [
        f"{registry.key}={name}: {field}"
        for registry in (LOSSES, SCHEMES)
        for name in registry.names()
        for field, info in registry.get(name).model_fields.items()
        if field != "kind" and not info.description
    ]
    assert undocumented == []


def test_import_modules_registers_a_users_loss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrl.algos import LOSSES

    (tmp_path / "my_losses.py").write_text(
        "from typing import Literal\n"
        "from agentrl.algos import GSPOToken, register_loss\n\n\n"
        "class Wide(GSPOToken):\n"
        '    """GSPO-token with a wider default band."""\n\n'
        '    kind: Literal["wide"] = "wide"\n'
        "    eps_low: float = 0.01\n\n\n"
        "register_loss(Wide)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(LOSSES, "_classes", dict(LOSSES._classes))
    config = load_config(TINY, ["algorithm.import_modules=[my_losses]", "algorithm.loss=wide"])
    assert config.algorithm.loss.kind == "wide" and config.algorithm.loss.eps_low == 0.01  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"algorithm.import_modules: cannot import 'no_such_losses'"):
        load_config(TINY, ["algorithm.import_modules=[no_such_losses]"])


def test_a_command_line_typo_is_attributed_to_the_command_line() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(TINY, ["trainer.lrr=1e-6"])
    message = str(info.value)
    assert message.startswith(f"config {str(TINY)!r} has 1 problem")
    line = next(line for line in message.splitlines() if "trainer.lrr" in line)
    assert line.startswith("  trainer.lrr: unknown key (value 1e-06) -> Did you mean 'lr'?")
    assert line.endswith("[set on the command line: trainer.lrr=1e-6]")


def test_one_vocabulary_and_no_table_of_old_keys() -> None:
    """One tag word (kind) for every tagged union, one precision spelling; a key that is gone is an unknown key like
    any other (no compatibility layer and no table of old names: nothing was released)."""

    def problems(*overrides: str) -> str:
        with pytest.raises(ConfigError) as info:
            load_config(TINY, list(overrides))
        return str(info.value)

    assert "write kind: grpo instead of name: grpo" in problems("algorithm.loss={name: grpo}")
    assert "write kind: tis instead of name: tis" in problems("algorithm.is_correction={name: tis, cap: 2.0}")
    gone = problems("trainer.save_every=3")
    assert "trainer.save_every: unknown key" in gone and "checkpoint_every_steps" in gone  # listed among known keys
    assert "renamed" not in gone
    assert "'float32'" in problems("trainer.precision=fp32")  # the error lists the one spelling
    config = load_config(TINY, ["algorithm.loss={kind: grpo}", "trainer.precision=float32"])
    assert config.algorithm.loss.kind == "grpo" and config.trainer.precision == "float32"


def test_the_run_seed_seeds_every_section_unless_a_section_sets_its_own() -> None:
    config = load_config(TINY, ["seed=7"])
    assert (config.seed, config.trainer.seed, config.rollout.seed, config.engine.seed) == (7, 7, 7, 7)  # type: ignore[attr-defined]
    config = load_config(TINY, ["seed=7", "engine.seed=3"])
    assert (config.trainer.seed, config.rollout.seed, config.engine.seed) == (7, 7, 3)  # type: ignore[attr-defined]
    default = load_config(TINY)
    assert (default.seed, default.trainer.seed, default.rollout.seed) == (0, 0, 0)
    served = load_config(TINY, ["seed=5", "engine={kind: sglang, urls: ['http://127.0.0.1:1']}"])
    assert served.trainer.seed == 5 and "seed" not in type(served.engine).model_fields  # no seed to give, no error


def test_register_env_comes_from_agentrl_env_beside_multiturnenv() -> None:
    from agentrl.env import MultiTurnEnv, register_env
    from agentrl.env.registry import register_env as in_registry

    assert register_env is in_registry and MultiTurnEnv.__module__ == "agentrl.env.base"


def test_a_plugin_tagged_by_name_is_refused_naming_kind() -> None:
    from typing import Literal

    from agentrl.algos import LOSSES, GSPOToken

    class Narrow(GSPOToken):
        """A loss written with the old tag word."""

        name: Literal["narrow"] = "narrow"

    with pytest.raises(ConfigError, match=r"tagged by 'kind': write kind: Literal\['narrow'\] = 'narrow'"):
        LOSSES.register(Narrow)
