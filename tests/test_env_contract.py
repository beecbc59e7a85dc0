"""The env contract where env returns enter the rollout: wrong shapes name the method, the value and the fix;
the info keys agentrl reads are exactly those ``EnvInfo`` documents."""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentrl.env import EnvInfo, MultiTurnEnv, user
from agentrl.env.contract import checked_reset, checked_step
from agentrl.errors import AgentRLError, EnvContractError

ROOT = Path(__file__).resolve().parents[1]


class Quiz(MultiTurnEnv):
    """A stand-in env class: the checks only need its name."""


def test_good_returns_pass_and_come_back_as_plain_values() -> None:
    messages, info = checked_reset(Quiz(), ([user("hi")], {"max_new_tokens": np.int64(8)}))
    assert messages == [{"role": "user", "content": "hi"}] and info["max_new_tokens"] == 8
    out = checked_step(Quiz(), ([], np.float32(0.5), np.bool_(True), False, {"success": np.bool_(True)}))
    assert (out.messages, out.reward, out.terminated, out.truncated) == ([], 0.5, True, False)
    assert type(out.reward) is float and type(out.terminated) is bool
    checked_step(Quiz(), ((user("a"),), 1, False, False, {"outcome": None, "sandbox_time_s": None}))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("hello", r"Quiz\.reset broke the env contract: it returned 'hello' \(a str\); reset must return a tuple"),
        (("hello", {}), r"Quiz\.reset .*the observation is 'hello' \(a str\), not a list of chat messages"),
        ([user("hi")], r"Quiz\.reset .*it returned \[\{'role': 'user', 'content': 'hi'\}\] \(a list\)"),
        (([user("hi")], None), r"info is None \(a NoneType\), not a dict"),
        (([{"role": "bot", "content": "x"}], {}), r"message 0 has role 'bot'; roles are system, user, assistant, tool"),
        (([{"role": "user", "content": 3}], {}), r"message 0 has content 3 \(a int\); content must be a str"),
        (([user("hi")], {"max_new_tokens": 0}), r"info\['max_new_tokens'\] is 0 \(a int\); it must be an int >= 1"),
    ],
)
def test_bad_reset_returns_name_what_was_returned_and_what_is_required(value: Any, expected: str) -> None:
    with pytest.raises(EnvContractError, match=expected) as caught:
        checked_reset(Quiz(), value)
    assert "(messages, info)" in str(caught.value)
    assert isinstance(caught.value, AgentRLError) and isinstance(caught.value, TypeError)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (([], 0.0, True, {}), r"it returned \(\[\], 0\.0, True, \{\}\) \(a tuple\) \(old gym's 4-tuple"),
        (("done", 0.0, True, False, {}), r"the observation is 'done' \(a str\)"),
        (([], math.nan, True, False, {}), r"the reward is nan \(a float\), not a finite float"),
        (([], None, True, False, {}), r"the reward is None \(a NoneType\)"),
        (([], 1.0, "yes", False, {}), r"terminated/truncated are 'yes' \(a str\)/False \(a bool\), not bools"),
        (([], 1.0, True, False, {"success": "yes"}), r"info\['success'\] is 'yes' \(a str\); it must be a bool"),
        (([], 1.0, True, False, {"reward_components": {"a": "1"}}), r"info\['reward_components'\] .* a dict of"),
        (([], 1.0, True, False, {"outcome": math.inf}), r"info\['outcome'\] is inf"),
        (([], 1.0, True, False, {"sandbox_time_s": -1}), r"info\['sandbox_time_s'\] is -1"),
        (([], 1.0, True, False, {"hack_flags": "introspection"}), r"info\['hack_flags'\] is 'introspection'"),
        (([], 1.0, True, False, {"hack_flags": [3]}), r"info\['hack_flags'\] is \[3\] .* list of 'kind: detail'"),
    ],
)
def test_bad_step_returns_name_what_was_returned_and_what_is_required(value: Any, expected: str) -> None:
    with pytest.raises(EnvContractError, match=expected) as caught:
        checked_step(Quiz(), value)
    assert str(caught.value).startswith("Quiz.step broke the env contract: ")
    assert "step must return a tuple (messages, reward, terminated, truncated, info)" in str(caught.value)


def _info_keys_read(path: Path) -> set[str]:
    """String keys read from a name or attribute ``info``: ``info.get("k")``, ``x.info["k"]``, ``"k" in info``."""
    keys: set[str] = set()

    def is_info(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "info") or (
            isinstance(node, ast.Attribute) and node.attr == "info"
        )

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Subscript) and is_info(node.value) and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and is_info(node.func.value)
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            keys.add(node.args[0].value)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and is_info(node.comparators[0]):
            keys.add(node.left.value)
    return keys


def test_every_info_key_agentrl_reads_is_documented_on_env_info() -> None:
    read = {key: path for path in (ROOT / "agentrl").rglob("*.py") for key in _info_keys_read(path)}
    read.pop("logprob_semantics", None)  # an SGLang server's /get_server_info answer, not an env's info
    read.pop("return_original_logprob", None)
    assert set(EnvInfo.__annotations__) >= {"success", "reward_components", "outcome", "max_new_tokens"}
    undocumented = {
        key: str(path.relative_to(ROOT)) for key, path in read.items() if key not in EnvInfo.__annotations__
    }
    assert undocumented == {}, f"add these keys to agentrl.env.EnvInfo (and the env tutorial): {undocumented}"
    unread = set(EnvInfo.__annotations__) - set(read)
    assert unread == set(), f"EnvInfo documents keys nothing reads: {unread}"
