"""The tool job's warm-up chats: scripted through the env, training questions only, a share fixing a slip."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from agentrl.tools.toolcall import parse_tool_calls
from envs.tool_use.demos import demonstration
from envs.tool_use.env import ToolUseEnv

ROOT = Path(__file__).resolve().parents[2]


def _chats_script():
    spec = importlib.util.spec_from_file_location("tool_agent_chats", ROOT / "scripts" / "tool_agent_chats.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_chats_cover_the_training_kinds_and_never_a_validation_or_heldout_question(tmp_path: Path) -> None:
    out = tmp_path / "chats.jsonl"
    chats = _chats_script().main(
        ["--config", str(ROOT / "configs" / "tool_agent.yaml"), "--chats", "12", "--out", str(out)]
    )
    assert [json.loads(line)["messages"] for line in out.read_text().splitlines()] == chats
    kwargs = _chats_script().env_kwargs_of(ROOT / "configs" / "tool_agent.yaml")
    env = ToolUseEnv(**kwargs)
    train = {env.reset(options={"task_id": t})[0][-1]["content"] for t in env.task_ids()}
    others = set()
    for split in ("validation", "test"):  # test: every held-out question, whole kinds and instances
        other = ToolUseEnv(**{**kwargs, "split": split})
        others |= {other.reset(options={"task_id": t})[0][-1]["content"] for t in other.task_ids()}
    questions = [chat[1]["content"] for chat in chats]
    assert set(questions) <= train and not set(questions) & others
    assert any("combined" in q for q in questions) and any("million more" in q for q in questions)
    slips = [chat for chat in chats if any(m["role"] == "tool" and m["content"].startswith("Error:") for m in chat)]
    assert len(slips) == 3  # a quarter of 12
    for chat in chats:
        assert chat[-1]["role"] == "assistant" and chat[-1]["content"].startswith("Answer: ")


def test_a_demonstration_is_played_through_the_env_and_its_tool_messages_are_the_envs() -> None:
    env = ToolUseEnv(kinds=["pop_ratio"], heldout_kinds=[], per_kind=20, heldout_per_kind=5, max_turns=4)
    chat = demonstration(env, "pop_ratio/002", slip=True, seed=3)
    calls = [c for m in chat if m["role"] == "assistant" for c in parse_tool_calls(m["content"])]
    assert [c.name for c in calls] == ["lookup", "lookup", "lookup", "calculator"]
    replay = ToolUseEnv(kinds=["pop_ratio"], heldout_kinds=[], per_kind=20, heldout_per_kind=5, max_turns=4)
    replay.reset(options={"task_id": "pop_ratio/002"})
    position = 2
    for message in chat[2:]:
        if message["role"] != "assistant":
            continue
        observation, _, terminated, _, info = replay.step(message["content"])
        position += 1
        assert chat[position : position + len(observation)] == observation
        position += len(observation)
    assert terminated and info["success"]


def test_a_config_of_another_env_is_refused() -> None:
    with pytest.raises(SystemExit, match="these chats are for agentrl/ToolUse-v0"):
        _chats_script().env_kwargs_of(ROOT / "configs" / "quickstart.yaml")
