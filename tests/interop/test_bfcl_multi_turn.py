"""BFCL-MultiTurn-v0 against BFCL itself (bfcl-eval in .venv-bfcl): the same verdicts, the same error texts.

The reference (tests/interop/bfcl_reference.py) is BFCL's own evaluation path in a separate process:
its Qwen FC decoder on the model's texts, then ``multi_turn_checker`` on the whole entry at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from bfcl_harness import play, reference, require_bfcl
from gymnasium.utils.env_checker import check_env

from agentrl.env.registry import make_env
from agentrl.errors import PreflightError
from agentrl.tools.toolcall import format_tool_call
from envs.interop.bfcl.env import BfclMultiTurnEnv
from envs.interop.bfcl.tasks import CATEGORIES, in_split

# Entry numbers of each category in the agreement test: train and test entries, one- and two-class scenarios.
NUMBERS = (0, 3, 17, 101)
KINDS = ("ground_truth", "one_call_wrong", "empty_turn", "malformed")


@pytest.fixture(scope="module")
def env() -> Iterator[BfclMultiTurnEnv]:
    require_bfcl()
    built = make_env("agentrl/BFCL-MultiTurn-v0", categories=list(CATEGORIES), split="all")
    assert isinstance(built, BfclMultiTurnEnv)
    yield built
    built.close()


def test_split_is_fixed_by_entry_number_and_covers_each_category(env: BfclMultiTurnEnv) -> None:
    ids = env.task_ids()
    assert len(ids) == 800
    test = [i for i in ids if in_split(i, "test")]
    train = [i for i in ids if in_split(i, "train")]
    assert len(test) == 160 and len(train) == 640 and not set(test) & set(train)
    assert "multi_turn_miss_func_195" in test and "multi_turn_miss_func_196" in train
    only_test = make_env("agentrl/BFCL-MultiTurn-v0", categories=["long_context"], split="test")
    try:
        assert only_test.task_ids() == [f"multi_turn_long_context_{n}" for n in range(0, 200, 5)]
    finally:
        only_test.close()


def test_env_passes_check_env(env: BfclMultiTurnEnv) -> None:
    check_env(env, skip_render_check=True)
    messages, info = env.reset(options={"task_id": "multi_turn_base_0"})
    assert messages[0]["role"] == "system" and '"name": "mkdir"' in messages[0]["content"]
    assert messages[1]["role"] == "user" and info == {"task_id": "multi_turn_base_0"}


def test_preflight_names_bfcl_and_a_missing_venv_names_the_fix(env: BfclMultiTurnEnv, tmp_path: Path) -> None:
    assert env.preflight() == [f"bfcl-eval 2026.3.23 ({env.bridge.python}): 800 all entries"]
    missing = make_env("agentrl/BFCL-MultiTurn-v0", python=str(tmp_path / "no-venv" / "python"))
    with pytest.raises(PreflightError, match="scripts/setup_bfcl.sh"):
        missing.preflight()


def test_reward_equals_bfcl_checker_entry_by_entry(env: BfclMultiTurnEnv, tmp_path: Path) -> None:
    ids = [f"multi_turn_{category}_{n}" for category in CATEGORIES for n in NUMBERS]
    scripts = reference("scripts", ids, tmp_path)
    rows = [{"entry_id": i, "kind": kind, "turns": scripts[i][kind]} for i in ids for kind in KINDS]
    expected = reference("grade", rows, tmp_path)
    failing = 0
    for row, bfcl in zip(rows, expected, strict=True):
        ours = play(env, row["entry_id"], row["turns"])
        where = f"{row['entry_id']} {row['kind']}"
        assert ours["outcome"] == float(bfcl["valid"]), where
        assert ours["turns"] == [float(v) for v in bfcl["prefixes"]], where
        assert ours["decoded"] == bfcl["decoded"], where  # the same calls reached the checker
        assert sum(ours["rewards"]) == ours["outcome"] - 1.0, where  # -1 on the first failing turn, else 0
        if row["kind"] in ("ground_truth", "empty_turn"):  # BFCL's answer passes; a turn with no call fails
            assert ours["outcome"] == float(row["kind"] == "ground_truth"), where
        failing += row["kind"] == "one_call_wrong" and ours["outcome"] == 0.0
    assert failing >= len(ids) // 2, "most trajectories with a wrong call fail: the comparison has teeth"


def test_miss_func_reveals_the_function_with_bfcl_message(env: BfclMultiTurnEnv) -> None:
    messages, _ = env.reset(options={"task_id": "multi_turn_miss_func_0"})
    assert '"name": "sort"' not in messages[0]["content"]
    hidden = env.step(format_tool_call("sort", {"file_name": "final_report.pdf"}))[0]
    assert hidden[0]["content"] == "Error during execution: name 'sort' is not defined"
    for _ in range(3):
        messages, *_ = env.step("Done.")
    assert env.turn == 3 and messages[0]["role"] == "user"
    assert "'name': 'sort'" in messages[0]["content"]
    assert messages[0]["content"].endswith("I have updated some more functions you can choose from. What about now?")


def test_bad_input_comes_back_as_bfcl_harness_error_text(env: BfclMultiTurnEnv, tmp_path: Path) -> None:
    calls = [
        ("no_such_function", {"x": 1}, "no_such_function(x=1)"),  # unknown function
        ("mkdir", {"dir_name": 5}, "mkdir(dir_name=5)"),  # wrong argument type: raises inside the simulated API
        ("cd", {"path": "document"}, "cd(path='document')"),  # wrong argument name
        ("cd", {}, "cd()"),  # missing argument
        ("tail", {"file_name": "no_such_file.txt", "lines": "ten"}, "tail(file_name='no_such_file.txt',lines='ten')"),
    ]
    expected = reference("execute", [{"entry_id": "multi_turn_base_0", "calls": [c[2] for c in calls]}], tmp_path)[0]
    env.reset(options={"task_id": "multi_turn_base_0"})
    messages, reward, terminated, truncated, _ = env.step("".join(format_tool_call(n, a) for n, a, _ in calls))
    assert [m["content"] for m in messages] == expected
    assert all(text.startswith("Error during execution: ") for text in expected[:4])
    assert (reward, terminated, truncated) == (0.0, False, False)


def test_calls_that_would_run_code_in_the_grader_are_refused(env: BfclMultiTurnEnv, tmp_path: Path) -> None:
    """BFCL's executor evals the call string; a builtin name or a smuggled argument name never gets there."""
    marker = tmp_path / "pwned"
    env.reset(options={"task_id": "multi_turn_base_0"})
    attacks = [
        ("exec", {"source": f"open({str(marker)!r}, 'w').write('x')"}),
        ("cd", {f"folder=open({str(marker)!r}, 'w').write('x'),x": 1}),
        ("eval", {"source": "1"}),
    ]
    messages, *_ = env.step("".join(format_tool_call(n, a) for n, a in attacks))
    texts = [m["content"] for m in messages]
    assert texts[0] == "Error during execution: name 'exec' is not defined"
    assert texts[1].startswith("Error during execution: argument ") and "is not a literal value" in texts[1]
    assert texts[2] == "Error during execution: name 'eval' is not defined"
    assert not marker.exists()
    _, _, done, _, info = env.step("Done.")
    assert not done and info["reward_components"] == {"turn_0": 0.0}


def test_replay_reproduces_the_episode(env: BfclMultiTurnEnv) -> None:
    actions = [format_tool_call("cd", {"folder": "document"}), format_tool_call("ls", {}), "Done."]
    runs = []
    for _ in range(2):
        history, _ = env.reset(options={"task_id": "multi_turn_base_3"})
        for action in actions:
            history = [*history, *env.step(action)[0]]
        runs.append(json.dumps(history))
    assert runs[0] == runs[1]
