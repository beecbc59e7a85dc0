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
    # the answer is the episode's outcome, separate from the turn rewards (0 without fact/call rewards)
    assert (reward, info["outcome"]) == (0.0, 1.0) and terminated and info["success"]


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


def test_chained_kinds_need_two_facts_and_a_result() -> None:
    question = make_question("pop_diff/003")
    first, second = question.text.removeprefix("How many million more people live in ").rstrip("?").split(" than in ")
    a, b = lookup(first, "population_millions"), lookup(second, "population_millions")
    assert a > b and question.answer == round(a - b, 2) and question.needed == (a, b, question.answer)
    ratio = make_question("pop_ratio/000")
    assert ratio.answer == round(ratio.needed[0] / ratio.needed[1], 2) and ratio.answer > 1
    density = make_question("density/007")
    assert density.answer == round(density.needed[0] * 1e6 / density.needed[1], 2)
    with pytest.raises(ValueError, match="unknown question kind 'pop_sun'"):
        make_question("pop_sun/001")


def test_validation_split_sits_between_train_and_test_instances() -> None:
    kinds = {"kinds": ["pop_sum", "pop_diff", "pop_ratio"], "heldout_kinds": ["pop_ratio"]}
    split = {
        s: question_ids(s, 20, 5, validation_per_kind=3, **kinds) for s in ("train", "validation", "test_instances")
    }
    assert [len(split[s]) for s in split] == [24, 6, 10]
    assert split["validation"][:3] == ["pop_sum/012", "pop_sum/013", "pop_sum/014"]
    assert not set(split["train"]) & set(split["validation"]) and not set(split["validation"]) & set(
        split["test_instances"]
    )
    assert question_ids("test_kinds", 20, 5, **kinds) == [f"pop_ratio/{i:03d}" for i in range(20)]
    with pytest.raises(ValueError, match="'validation' is empty"):
        ToolUseEnv(split="validation", **kinds)
    with pytest.raises(ValueError, match=r"heldout_kinds \['multi'\] are not in kinds"):
        ToolUseEnv(kinds=["pop_sum"])
    with pytest.raises(ValueError, match="leave no training question"):
        ToolUseEnv(per_kind=10, heldout_per_kind=5, validation_per_kind=5)


def test_turn_rewards_pay_valid_calls_and_each_needed_fact_once() -> None:
    env = ToolUseEnv(kinds=["pop_sum"], heldout_kinds=[], fact_reward=0.6, call_reward=0.1, max_turns=7)
    env.reset(options={"task_id": "pop_sum/004"})
    question = env.question
    first, second = question.text.removeprefix("What is the combined population of ").split(",")[0].split(" and ")
    look = [format_tool_call("lookup", {"country": c, "field": "population_millions"}) for c in (first, second)]
    bad = format_tool_call("lookup", {"country": "Atlantis", "field": "population_millions"})
    _, reward, _, _, info = env.step(look[0] + "\n" + bad)  # one fact of three, and a failed call
    assert reward == pytest.approx(0.6 / 3 - 0.1) and info["action"] == "run" and info["run_failed"]
    assert (info["tool_calls"], info["tool_errors"]) == (2, 1)
    _, reward, _, _, info = env.step(look[0] + "\n" + look[1])  # the first fact again pays nothing
    assert reward == pytest.approx(0.6 / 3) and not info["run_failed"]
    _, reward, _, _, _ = env.step("thinking")  # neither a call nor an answer
    assert reward == pytest.approx(-0.1)
    assert env.step(look[1])[1] == 0.0  # a valid call that returns nothing new earns nothing: calling never pays
    expression = f"{question.needed[0]} + {question.needed[1]}"
    _, reward, _, _, _ = env.step(format_tool_call("calculator", {"expression": expression}))
    assert reward == pytest.approx(0.6 / 3)
    _, reward, terminated, _, info = env.step(f"Answer: {question.answer}")
    assert (reward, info["outcome"], info["action"], terminated) == (0.0, 1.0, "submit", True)


def test_a_truncated_episode_ends_with_outcome_zero() -> None:
    env = ToolUseEnv(max_turns=2, call_reward=0.1)
    env.reset(options={"task_id": "calc/001"})
    assert "outcome" not in env.step(format_tool_call("calculator", {"expression": "1 + 1"}))[4]
    _, reward, _, truncated, info = env.step(format_tool_call("calculator", {"expression": "2 + 2"}))
    assert truncated and info["outcome"] == 0.0 and reward == 0.0


def test_chained_kinds_never_repeat_a_question_across_splits() -> None:
    kinds = {"kinds": ["pop_sum", "pop_diff", "area_sum"], "heldout_kinds": []}
    texts = {
        split: {make_question(i).text for i in question_ids(split, 120, 40, validation_per_kind=20, **kinds)}
        for split in ("train", "validation", "test_instances")
    }
    assert [len(texts[s]) for s in texts] == [180, 60, 120]  # every question distinct
    with pytest.raises(ValueError, match="'density' has 16 different questions, fewer than per_kind 20"):
        ToolUseEnv(kinds=["density", "pop_sum"], heldout_kinds=[], per_kind=20, heldout_per_kind=5)
