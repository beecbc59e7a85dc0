"""Agent programs on the official openai client, trained through the gateway: episodes on the real embedded engine.

The tool-using loop runs on a tiny model taught the calculator exchange (``taught_model.py``), so the engine
samples a real ``<tool_call>`` that the gateway parses into ``tool_calls``; everything else runs on the
random tiny model. Each agent keeps the replies it got, to compare with what the episode recorded.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import gateway_agents
import pytest
from gateway_harness import gateway, orchestrator, rollout_config
from taught_model import calc_tasks

from agentrl.errors import RolloutError
from agentrl.trajectory import Episode

pytest.importorskip("openai", reason="needs the openai client: pip install 'agentrl[gateway]'")


def _turn_tokens(episode: Episode, turn: int) -> tuple[list[int], list[float], list[int]]:
    ids, logprobs, versions = [], [], []
    for seg in episode.segments:
        for tok, lp, mask, k, v in zip(seg.completion_ids, seg.logprobs, seg.loss_mask, seg.turn_ids, seg.versions):
            if mask and k == turn:
                ids.append(tok)
                logprobs.append(lp)
                versions.append(v)
    return ids, logprobs, versions


def _collect(model_dir: Path, factory, **rollout) -> list[Episode]:
    async def main() -> list[Episode]:
        async with orchestrator(model_dir, factory, rollout_config(**rollout)) as orch:
            batch = await orch.collect_step(1)
        return [e for group in batch.groups for e in group]

    return asyncio.run(main())


def test_a_tool_using_agent_trains_through_the_gateway(taught_model_dir: Path) -> None:
    gateway_agents.RECEIVED.clear()
    episodes = _collect(taught_model_dir, gateway("gateway_agents:calc_agent", calc_tasks()), temperature=0.5)
    assert len(episodes) == 2
    for episode in episodes:
        task = next(t for t in calc_tasks() if t["task_id"] == episode.task_id)
        assert (episode.status, episode.final_reward, len(episode.turns), len(episode.segments)) == (
            "complete",
            1.0,
            2,
            1,
        )
        [call_reply, answer_reply] = gateway_agents.RECEIVED[episode.task_id]
        [tool_call] = call_reply.choices[0].message.tool_calls
        assert call_reply.choices[0].finish_reason == "tool_calls" and tool_call.function.name == "multiply"
        assert tool_call.id == "call_0_0" and answer_reply.choices[0].message.content == str(task["answer"])
        for k, reply in enumerate((call_reply, answer_reply)):  # what the agent got is what was recorded
            ids, logprobs, versions = _turn_tokens(episode, k)
            assert [entry.logprob for entry in reply.choices[0].logprobs.content] == logprobs
            assert reply.usage.completion_tokens == len(ids) and set(versions) == {0}
        seg = episode.segment
        env_ids = [t for t, m in zip(seg.completion_ids, seg.loss_mask) if not m]
        from transformers import AutoTokenizer

        env_text = AutoTokenizer.from_pretrained(taught_model_dir).decode(env_ids)
        assert f"<|im_start|>tool\n{task['answer']}<|im_end|>" in env_text  # the tool result: env tokens, mask 0
        assert all(v == -1 and lp == 0.0 for v, lp, m in zip(seg.versions, seg.logprobs, seg.loss_mask) if not m)
        assert episode.turns[0].env_messages == [
            {"role": "tool", "content": str(task["answer"]), "tool_call_id": "call_0_0"}
        ]
        notes = episode.turns[0].info["gateway"]["notes"]
        assert notes == ["temperature=0.7 overridden by the run's sampling"]
        assert episode.turns[0].max_new_tokens == 40  # the request's max_tokens


def test_an_agent_that_rewrites_its_history_gets_a_recorded_new_segment(tiny_model_dir: Path) -> None:
    tasks = [{"task_id": "q1", "question": "What is 2 + 2?"}, {"task_id": "q2", "question": "Name a colour."}]
    episodes = _collect(tiny_model_dir, gateway("gateway_agents:forgetful_agent", tasks))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for episode in episodes:
        assert episode.status == "complete" and episode.final_reward == 0.5
        assert episode.reward_components == {"tried": 0.5} and len(episode.segments) == 2
        history = [t.info["gateway"]["history"] for t in episode.turns]
        assert history == ["opening", "extended", "rewritten"]
        reason = episode.turns[2].info["gateway"]["rewrite_reason"]
        assert reason.startswith("the request has 2 messages, no more than the 5 the episode already holds")
        first, second = episode.segments
        assert set(first.turn_ids) == {0, 1, -1} and set(second.turn_ids) <= {2}
        question = next(t["question"] for t in tasks if t["task_id"] == episode.task_id)
        expected = tokenizer.apply_chat_template(
            [
                {"role": "system", "content": gateway_agents.SYSTEM},
                {"role": "user", "content": "Start over: " + question},
            ],
            add_generation_prompt=True,
            tokenize=False,
        )
        assert tokenizer.decode(second.prompt_ids) == expected  # the rewritten history, rendered afresh
        assert episode.messages[:2] == [
            {"role": "system", "content": gateway_agents.SYSTEM},
            {"role": "user", "content": "Start over: " + question},
        ]


def test_streaming_and_plain_def_agents(tiny_model_dir: Path) -> None:
    gateway_agents.RECEIVED.clear()
    tasks = [{"task_id": "s1", "question": "Hello"}, {"task_id": "s2", "question": "Hi"}]
    streamed = _collect(tiny_model_dir, gateway("gateway_agents:streaming_agent", tasks))
    for episode in streamed:
        [(text, usage, finish)] = gateway_agents.RECEIVED[episode.task_id]
        assert text == episode.turns[0].action.removesuffix("<|im_end|>") and finish in ("stop", "length")
        assert usage.completion_tokens == episode.turns[0].num_tokens
    plain = _collect(tiny_model_dir, gateway("gateway_agents:plain_agent", tasks))
    assert [e.final_reward for e in plain] == [1.0, 1.0]


@pytest.mark.parametrize(
    ("agent", "expected"),
    [
        ("failing_agent", r"the agent program failed: ValueError: boom on t1"),
        ("silent_agent", r"ended before its first model call \(it returned reward 1.0\)"),
        ("wordy_agent", r"the reward of agent gateway_agents:wordy_agent is 'great job' \(a str\)"),
    ],
)
def test_a_failing_agent_fails_its_episode_with_the_reason(tiny_model_dir: Path, agent: str, expected: str) -> None:
    factory = gateway(f"gateway_agents:{agent}", [{"task_id": "t1", "question": "x"}])
    with pytest.raises(RolloutError, match=expected):
        _collect(tiny_model_dir, factory, prompts_per_step=1, on_failure="fail")
