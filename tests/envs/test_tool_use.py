"""ToolUse-v0: tools, malformed calls answered as messages, answers graded, splits by kind."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envs  # noqa: F401 - registers the bundled environments
from agentrl.errors import ToolCallError
from agentrl.tools.toolcall import format_tool_call
from envs.tool_use.env import ToolUseEnv, parse_answer, score_answer
from envs.tool_use.questions import make_question, question_ids
from envs.tool_use.tools import calculator, convert_units, lookup


def test_calculator_evaluates_arithmetic_without_eval() -> None:
    assert calculator("(12 + 3) * 4.5") == "67.5"
    assert calculator("2 ** 10 - 24 // 5 % 3") == "1023"
    with pytest.raises(ToolCallError, match="unsupported syntax"):
        calculator("__import__('os').system('true')")
    with pytest.raises(ToolCallError, match="too large"):
        calculator("9 ** 9 ** 9")
    with pytest.raises(ToolCallError, match="division by zero"):
        calculator("1 / 0")


def test_unit_conversion_and_lookup() -> None:
    assert convert_units(3.5, "km", "m") == 3500.0
    assert convert_units(100, "C", "F") == 212.0
    assert convert_units(1, "mile", "km") == pytest.approx(1.609344)
    with pytest.raises(ToolCallError, match="cannot convert length"):
        convert_units(1, "km", "kg")
    assert lookup("kenya", "capital") == "Nairobi"
    with pytest.raises(ToolCallError, match="Did you mean 'Kenya'"):
        lookup("Kenia", "capital")


def test_questions_are_deterministic_and_split_by_kind() -> None:
    assert make_question("calc/004") == make_question("calc/004")
    train = set(question_ids("train", 20, 5))
    test_kinds = set(question_ids("test_kinds", 20, 5))
    test_instances = set(question_ids("test_instances", 20, 5))
    assert len(train) == 45 and len(test_kinds) == 20 and len(test_instances) == 15
    assert not train & test_kinds and not train & test_instances
    assert {i.split("/")[0] for i in test_kinds} == {"multi"}


def test_scripted_episode_with_tool_calls_earns_reward_one() -> None:
    env = gym.make("agentrl/ToolUse-v0", split="test_kinds")
    observation, info = env.reset(seed=0, options={"task_id": "multi/001"})
    question = make_question("multi/001")
    assert observation[-1]["content"] == question.text and info["kind"] == "multi"
    messages, reward, terminated, truncated, _ = env.step(format_tool_call("calculator", {"expression": "6 * 7"}))
    assert messages == [{"role": "tool", "content": "42", "name": "calculator"}]
    assert (reward, terminated, truncated) == (0.0, False, False)
    _, reward, terminated, _, info = env.step(f"The result is ready.\nAnswer: {question.answer}")
    assert reward == 1.0 and terminated and info["success"]


def test_malformed_tool_calls_become_error_messages_not_exceptions() -> None:
    env = ToolUseEnv(max_turns=5)
    env.reset(seed=1, options={"task_id": "calc/000"})
    cases = [
        "<tool_call>{not json}</tool_call>",
        '<tool_call>{"name": "calculatr", "arguments": {"expression": "1+1"}}</tool_call>',
        '<tool_call>{"name": "convert_units", "arguments": {"value": "lots", "from_unit": "km"}}</tool_call>',
        '<tool_call>{"name": "lookup", "arguments": {"country": "Atlantis", "field": "capital"}}</tool_call>',
    ]
    for action in cases:
        messages, reward, terminated, _, info = env.step(action)
        assert len(messages) == 1 and messages[0]["role"] == "tool"
        assert messages[0]["content"].startswith("Error:") and not terminated and info["tool_errors"] == 1
    assert "Did you mean 'calculator'" in env.step(cases[1])[0][0]["content"]


def test_answers_are_parsed_and_scored() -> None:
    assert parse_answer("thinking...\nAnswer: 1,234.5.") == "1,234.5"
    assert parse_answer("no final line") is None
    assert score_answer("1,234.5", 1234.5) == 1.0
    assert score_answer("Nairobi", "nairobi") == 1.0
    assert score_answer("1300", 1234.5) == 0.0
    assert 0.0 < score_answer("1300", 1234.5, "graded") < 1.0


def test_turn_limit_truncates() -> None:
    env = ToolUseEnv(max_turns=2)
    env.reset(seed=0, options={"task_id": "lookup/002"})
    assert env.step("hmm")[3] is False
    _, _, terminated, truncated, _ = env.step("still thinking")
    assert truncated and not terminated
