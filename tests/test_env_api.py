"""The environment API: text spaces, the sample envs under check_env / gymnasium.make / vector envs, replay."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401 - registers agentrl/GuessNumber-v0 and agentrl/MagicWord-v0
from agentrl.env import MultiTurnEnv, StepResult, restore_env, user
from agentrl.env.spaces import MessageList, UnicodeText
from agentrl.errors import RolloutError
from envs.guess_number import GuessNumber
from envs.magic_word import MagicWord, magic_word_reward


def test_unicode_text_accepts_any_unicode_where_gymnasium_text_does_not() -> None:
    text = "héllo 漢字 🙂 ß"
    assert not gym.spaces.Text(64).contains(text)  # why UnicodeText exists
    space = UnicodeText(max_length=20)
    assert space.contains(text)
    assert not space.contains("x" * 21)
    assert not space.contains(b"bytes")
    assert not UnicodeText(min_length=2).contains("a")


def test_spaces_compare_by_value_and_sample_reproducibly() -> None:
    assert UnicodeText(10) == UnicodeText(10) and hash(UnicodeText(10)) == hash(UnicodeText(10))
    assert UnicodeText(10) != UnicodeText(11)
    assert MessageList() == MessageList() and MessageList() != UnicodeText()
    first, second = MessageList(seed=3), MessageList(seed=3)
    samples = [first.sample() for _ in range(5)]
    assert samples == [second.sample() for _ in range(5)]
    assert all(first.contains(s) for s in samples)
    assert UnicodeText(5, seed=1).sample() == UnicodeText(5, seed=1).sample()
    assert len(UnicodeText(5, seed=1).sample()) <= 5


def test_message_list_rejects_malformed_messages() -> None:
    space = MessageList()
    assert space.contains([user("hi"), {"role": "tool", "content": "3", "name": "add"}])
    assert not space.contains([{"role": "robot", "content": "hi"}])
    assert not space.contains([{"role": "user", "content": 3}])
    assert not space.contains(({"role": "user", "content": "x"},))
    assert space.to_jsonable([[user("a")]]) == [[{"role": "user", "content": "a"}]]


@pytest.mark.parametrize("env_id", ["agentrl/GuessNumber-v0", "agentrl/MagicWord-v0"])
def test_sample_envs_pass_check_env_via_gymnasium_make(env_id: str) -> None:
    env = gym.make(env_id)
    check_env(env.unwrapped, skip_render_check=True)
    messages, _ = env.reset(seed=0)
    assert env.observation_space.contains(messages)
    assert isinstance(env.unwrapped, MultiTurnEnv)


def test_guess_number_against_a_scripted_binary_search_policy() -> None:
    env = gym.make("agentrl/GuessNumber-v0")
    messages, _ = env.reset(seed=42)
    low, high, total, turns = 1, 100, 0.0, 0
    terminated = False
    while not terminated and turns < GuessNumber.max_turns:
        guess = (low + high) // 2
        messages, reward, terminated, truncated, info = env.step(f" {guess}\n")
        total, turns = total + float(reward), turns + 1
        assert info["valid_guess"] and not truncated
        if messages:
            low, high = (guess + 1, high) if messages[0]["content"] == "higher" else (low, guess - 1)
    assert terminated and total == 1.0 and turns <= 7
    assert env.unwrapped.target == guess


def test_guess_number_answers_non_numbers_with_a_hint() -> None:
    env = GuessNumber(max_value=10)
    env.reset(seed=1)
    for action in ["fifty", "²", "", "１２"]:  # non-ASCII digits are not numbers here
        messages, reward, terminated, _, _ = env.step(action)
        assert messages == [user("Not a number.")] and reward == 0.0 and not terminated


def test_vector_env_steps_text_actions() -> None:
    vec = gym.make_vec("agentrl/GuessNumber-v0", num_envs=2, vectorization_mode="sync")
    observations, _ = vec.reset(seed=0)
    assert len(observations) == 2 and observations[0][0]["role"] == "user"
    observations, rewards, terminated, _, _ = vec.step(("50", "é?"))
    assert observations[1] == [user("Not a number.")]
    assert rewards.shape == (2,) and not terminated.any()
    vec.close()


def test_magic_word_reward_and_tasks() -> None:
    assert magic_word_reward("Please!", "please") == 1.0
    assert magic_word_reward("", "please") == 0.0
    assert magic_word_reward("xyz", "please") == 0.0
    assert magic_word_reward("pl zz", "please") == pytest.approx(0.25)
    env = MagicWord(turns=2, num_tasks=3, split="test")
    assert env.task_ids() == ["test-0", "test-1", "test-2"]
    messages, info = env.reset(seed=5, options={"task_id": "test-1"})
    assert info["task_id"] == "test-1" and "test-1" in messages[0]["content"]
    messages, reward, terminated, _, info = env.step("please")
    assert (reward, terminated, messages) == (1.0, False, [user("Say it again.")])
    assert info["reward_components"] == {"magic_word": 1.0}
    _, _, terminated, _, _ = env.step("no")
    assert terminated


def test_replay_restores_a_deterministic_env_mid_episode() -> None:
    actions = ["50", "25", "abc"]
    original = GuessNumber()
    original.reset(seed=7, options=None)
    played = [original.step(a)[0] for a in actions]
    fresh = GuessNumber()
    history = restore_env(fresh, seed=7, options=None, actions=actions)
    assert fresh.target == original.target
    assert history[1:] == [m for step in played for m in step]
    assert fresh.step("60")[:3] == original.step("60")[:3]


class _Counter(MultiTurnEnv):
    """Counts turns; state lives outside the seed, so it snapshots (or cannot replay)."""

    replayable = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        super().reset(seed=seed)
        self.count = 0
        return [user("count")], {}

    def step(self, action: str) -> StepResult:
        self.count += 1
        return [user(str(self.count))], 0.0, False, False, {}

    def snapshot(self) -> Any:
        return {"count": self.count}

    def restore(self, snapshot: Any) -> None:
        self.count = snapshot["count"]


def test_restore_uses_snapshot_and_refuses_replay_of_non_replayable_env() -> None:
    env = _Counter()
    restore_env(env, seed=0, options=None, actions=["a", "b"], snapshot={"count": 2})
    assert env.step("c")[0] == [user("3")]
    with pytest.raises(RolloutError, match="replayable=False.*snapshot"):
        restore_env(_Counter(), seed=0, options=None, actions=["a"])


def test_base_env_requires_step_and_seeds_np_random() -> None:
    class Bare(MultiTurnEnv):
        """No step."""

    env = Bare()
    assert env.reset(seed=3) == ([], {})
    assert isinstance(env.np_random, np.random.Generator)
    assert env.task_ids() == [] and env.snapshot() is None and env.tool_schemas() == []
    with pytest.raises(NotImplementedError, match="Bare must implement step"):
        env.step("x")
