"""Coding task sources, schema, held-out splits, and action parsing of CodeExec-v0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrl.errors import ConfigError, EnvNotFoundError
from agentrl.tools.toolcall import format_tool_call
from envs.code_exec.actions import defines_function, parse_action
from envs.code_exec.tasks import load_jsonl, load_tasks


def test_bundled_easy_tasks_follow_the_schema() -> None:
    tasks = load_tasks("easy")
    assert 60 <= len(tasks) <= 80
    assert len({t.task_id for t in tasks}) == len(tasks)
    assert len({t.kind for t in tasks}) >= 6
    for task in tasks:
        assert len(task.tests) == 3 and task.solution and defines_function(task.solution, task.entry_point)
        assert f"`{task.entry_point}(" in task.prompt  # the signature is shown


def test_splits_hold_out_whole_kinds_and_late_instances() -> None:
    train = load_tasks("easy", "train")
    test_kinds = load_tasks("easy", "test_kinds")
    test_instances = load_tasks("easy", "test_instances")
    assert {t.kind for t in test_kinds} == {"conditionals", "sets"}
    assert not {t.kind for t in train} & {t.kind for t in test_kinds}
    assert {t.kind for t in test_instances} <= {t.kind for t in train}
    ids = [t.task_id for t in train + test_kinds + test_instances]
    assert len(ids) == len(set(ids)) == len(load_tasks("easy"))
    assert load_tasks("easy", "test") == test_kinds + test_instances
    assert {t.kind for t in load_tasks("easy", "test_kinds", heldout_kinds=["lists"])} == {"lists"}


def test_humaneval_comes_from_the_package_data_file() -> None:
    tasks = load_tasks("humaneval", "test")
    assert len(tasks) == 164 and tasks[0].task_id == "HumanEval/0"
    assert (
        tasks[0].code_prefix.startswith("from typing import List") and "check(has_close_elements)" in tasks[0].tests[0]
    )


def test_jsonl_source_is_validated(tmp_path: Path) -> None:
    good = tmp_path / "tasks.jsonl"
    good.write_text(
        json.dumps({"task_id": "t1", "kind": "k", "prompt": "p", "entry_point": "f", "tests": ["assert f() == 1"]})
        + "\n\n"
    )
    assert load_jsonl(good)[0].entry_point == "f"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "t1", "prompt": "p"}) + "\n")
    with pytest.raises(ConfigError, match="bad.jsonl:1"):
        load_jsonl(bad)
    with pytest.raises(EnvNotFoundError, match="Did you mean 'easy'"):
        load_tasks("eazy")


def test_actions_classify_blocks_and_tool_calls() -> None:
    solution = "Here it is:\n```python\ndef double(n):\n    return 2 * n\n```"
    assert parse_action(solution, "double").kind == "submit"
    assert parse_action("```python\nprint(1 + 1)\n```", "double").kind == "run"
    assert parse_action("```python\ndef double(n):\n    return 2 * n\n", "double").code.startswith(
        "def double"
    )  # unclosed block
    assert parse_action(solution, "double", submit_on_definition=False).kind == "run"
    assert parse_action("I don't know", "double").kind == "none"
    call = parse_action(format_tool_call("run_python", {"code": "x = 1"}), "double")
    assert (call.kind, call.code, call.via_tool) == ("run", "x = 1", True)
    assert parse_action(format_tool_call("submit", {"code": "def double(n): ..."}), "double").kind == "submit"
    assert "not valid JSON" in parse_action("<tool_call>{oops</tool_call>", "double").error
    assert "unknown tool" in parse_action(format_tool_call("shell", {"code": "ls"}), "double").error
    assert "non-empty string" in parse_action(format_tool_call("run_python", {"src": "1"}), "double").error
