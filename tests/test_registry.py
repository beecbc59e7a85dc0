"""The env registry: ids and module:Class strings, did-you-mean errors, kwargs validation, listing."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

from agentrl.config.sections import EnvConfig
from agentrl.env.registry import env_config_problems, list_envs, make_env, make_env_factory, register_env, resolve_env
from agentrl.errors import ConfigError, EnvNotFoundError
from envs.guess_number import GuessNumber
from envs.magic_word import MagicWord


def test_factory_builds_fresh_unwrapped_envs_from_a_registry_id() -> None:
    factory = make_env_factory(EnvConfig(id="agentrl/GuessNumber-v0", kwargs={"max_value": 5}))
    first, second = factory(), factory()
    assert isinstance(first, GuessNumber) and first is not second
    assert first.config.max_value == 5 and first.spec is not None and first.spec.id == "agentrl/GuessNumber-v0"


def test_module_class_strings_resolve_without_registration() -> None:
    env = make_env("envs.magic_word:MagicWord", word="abc", turns=2)
    assert isinstance(env, MagicWord) and env.config.word == "abc"
    assert resolve_env("envs.magic_word:MagicWord").env_class is MagicWord


def test_unknown_id_gets_did_you_mean_and_the_fix() -> None:
    with pytest.raises(EnvNotFoundError) as info:
        make_env_factory(EnvConfig(id="agentrl/GuesNumber-v0"))
    message = str(info.value)
    assert "unknown environment id 'agentrl/GuesNumber-v0'. Did you mean 'agentrl/GuessNumber-v0'?" in message
    assert "agentrl envs" in message and "module:Class" in message
    assert isinstance(info.value, KeyError)  # the stdlib type too


def test_bad_module_class_strings_say_what_is_wrong() -> None:
    with pytest.raises(
        EnvNotFoundError, match="module 'envs.magic_word' has no attribute 'MagicWrd'.*Did you mean 'MagicWord'"
    ):
        resolve_env("envs.magic_word:MagicWrd")
    with pytest.raises(EnvNotFoundError, match="cannot import module 'no_such_module' of env 'no_such_module:Env'"):
        resolve_env("no_such_module:Env")
    with pytest.raises(ConfigError, match="the class Path, which does not subclass agentrl.MultiTurnEnv"):
        resolve_env("pathlib:Path")
    with pytest.raises(EnvNotFoundError, match="cannot import env module 'missing_envs' \\(env.import_modules\\)"):
        resolve_env("agentrl/GuessNumber-v0", import_modules=["missing_envs"])


def test_kwargs_are_validated_against_the_env_config_model() -> None:
    with pytest.raises(ConfigError) as info:
        make_env_factory(EnvConfig(id="agentrl/GuessNumber-v0", kwargs={"max_vale": 10}))
    assert "env.kwargs.max_vale: unknown key (value 10) -> Did you mean 'max_value'?" in str(info.value)
    problems = env_config_problems(EnvConfig(id="agentrl/GuessNumber-v0", kwargs={"max_value": 1}))
    assert [p.key for p in problems] == ["env.kwargs.max_value"] and "greater than or equal to 2" in problems[0].message
    assert [p.key for p in env_config_problems(EnvConfig(id="x", import_modules=["missing_envs"]))] == [
        "env.import_modules"
    ]


def test_envs_in_other_packages_appear_once_their_module_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_envs_pkg.py").write_text(
        textwrap.dedent('''
        """A third-party env package."""
        from agentrl.env import MultiTurnEnv, user
        from agentrl.env.registry import register_env

        class Echo(MultiTurnEnv):
            """Echo the action back."""
            max_turns = 2

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                return [user("say something")], {}

            def step(self, action):
                return [user(action)], 0.0, True, False, {}

        register_env("mine/Echo-v0", entry_point=Echo)
    ''')
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "mine/Echo-v0" not in [info.id for info in list_envs()]
    env = make_env_factory(EnvConfig(id="mine/Echo-v0", import_modules=["my_envs_pkg"]))()
    assert env.step("hé")[0] == [{"role": "user", "content": "hé"}]
    infos = {info.id: info for info in list_envs(["envs", "my_envs_pkg"])}
    assert infos["mine/Echo-v0"].summary == "Echo the action back." and infos["mine/Echo-v0"].max_turns == 2
    gym.registry.pop("mine/Echo-v0")
    sys.modules.pop("my_envs_pkg")


def test_register_env_is_idempotent_and_listing_skips_non_text_envs() -> None:
    register_env("agentrl/GuessNumber-v0", entry_point="envs.guess_number:GuessNumber")
    ids = [info.id for info in list_envs()]
    assert {"agentrl/GuessNumber-v0", "agentrl/MagicWord-v0"} <= set(ids)
    assert "CartPole-v1" not in ids and ids == sorted(ids)
    info = next(i for i in list_envs() if i.id == "agentrl/GuessNumber-v0")
    assert info.entry_point == "envs.guess_number:GuessNumber" and info.max_turns == 7


def test_broken_entry_points_and_non_class_targets_are_reported() -> None:
    register_env("mine/Broken-v0", entry_point="no_such_module_xyz:Env")
    try:
        with pytest.raises(
            EnvNotFoundError,
            match="'mine/Broken-v0' is registered with entry point 'no_such_module_xyz:Env', which cannot be loaded",
        ):
            resolve_env("mine/Broken-v0")
    finally:
        gym.registry.pop("mine/Broken-v0")
    with pytest.raises(ConfigError, match="'math:pi' is a float, not a MultiTurnEnv subclass"):
        resolve_env("math:pi")


def test_envs_listing_is_one_line_per_problem_and_reads_max_turns_from_the_config_model() -> None:
    infos = {info.id: info for info in list_envs()}
    gateway = infos["agentrl/AgentGateway-v0"]
    assert gateway.max_turns == 16  # AgentGatewayConfig's default, not MultiTurnEnv's 8
    assert "needs env.kwargs agent, tasks" in gateway.summary
    for info in infos.values():
        assert "\n" not in info.summary and "errors.pydantic.dev" not in info.summary, info


def test_import_modules_add_to_the_bundled_envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mine_only.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert EnvConfig(id="x").import_modules == []
    assert "agentrl/GuessNumber-v0" in [info.id for info in list_envs(["mine_only"])]
    env = make_env_factory(EnvConfig(id="agentrl/GuessNumber-v0", import_modules=["mine_only"]))()
    assert isinstance(env, GuessNumber)


def test_envs_listing_names_a_tool_no_schema_describes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "room_envs.py").write_text(
        textwrap.dedent('''
        """Tools typed with a class of the env's own."""
        from agentrl.env import MultiTurnEnv
        from agentrl.env.registry import register_env

        class Room:
            pass

        def enter(room: Room) -> str:
            """Enter a room."""
            return "in"

        class Rooms(MultiTurnEnv):
            """Walk between rooms."""
            tools = (enter,)

        register_env("mine/Rooms-v0", entry_point=Rooms)
    ''')
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        infos = {info.id: info for info in list_envs(["room_envs"])}
        assert "tool error: tool 'enter' parameter 'room' is typed Room" in infos["mine/Rooms-v0"].summary
    finally:
        gym.registry.pop("mine/Rooms-v0")
        sys.modules.pop("room_envs")


def test_listing_survives_an_entry_point_whose_module_registers_more_envs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `agentrl envs --import lazy_pkg`: the registered entry point is a string, so listing imports lazy_pkg_impl,
    # which registers two more envs while the listing walks the registry (it raised "dictionary changed size").
    (tmp_path / "lazy_pkg.py").write_text(
        'from agentrl.env.registry import register_env\nregister_env("lazy/A-v0", entry_point="lazy_pkg_impl:A")\n'
    )
    (tmp_path / "lazy_pkg_impl.py").write_text(
        textwrap.dedent('''
        """Envs whose import registers siblings."""
        from agentrl.env import MultiTurnEnv, user
        from agentrl.env.registry import register_env

        class A(MultiTurnEnv):
            """Env A."""
            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                return [user("a")], {}

            def step(self, action):
                return [], 0.0, True, False, {}

        class B(A):
            """Env B."""

        for i in range(2):
            register_env(f"lazy/B{i}-v0", entry_point=B)
    ''')
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        ids = [info.id for info in list_envs(["lazy_pkg"])]
        assert {"lazy/A-v0", "lazy/B0-v0", "lazy/B1-v0"} <= set(ids)
    finally:
        for env_id in ("lazy/A-v0", "lazy/B0-v0", "lazy/B1-v0"):
            gym.registry.pop(env_id, None)
        sys.modules.pop("lazy_pkg", None)
        sys.modules.pop("lazy_pkg_impl", None)
