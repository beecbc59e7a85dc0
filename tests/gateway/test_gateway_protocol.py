"""The gateway's pure parts: the request policy, the transcript (extend or rewrite), replies, agent outcomes."""

from __future__ import annotations

import json
import math

import pytest

from agentrl.errors import AgentGatewayError, ConfigError, GatewayRequestError, OpenAIRequestError
from agentrl.gateway.config import AgentGatewayConfig, CommandAgentConfig, PythonAgentConfig, load_tasks
from agentrl.gateway.programs import outcome_of
from agentrl.gateway.protocol import plan_chat_request
from agentrl.gateway.replies import SampledTurn, completion, cut_at_stop
from agentrl.gateway.transcript import Transcript
from agentrl.openai_api.requests import canonical_messages
from agentrl.openai_api.streaming import chat_stream_events
from agentrl.tools.toolcall import format_tool_call

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
ASK = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]


def test_sampling_settings_are_overridden_and_recorded_shaping_fields_honoured() -> None:
    plan = plan_chat_request(
        {
            "model": "x",
            "messages": ASK,
            "temperature": 0.2,
            "top_p": 0.9,
            "seed": 3,
            "max_tokens": 17,
            "stop": "END",
            "logprobs": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "tools": TOOLS,
            "tool_choice": "auto",
            "frobnicate": 1,
        }
    )
    assert (plan.max_tokens, plan.stop, plan.logprobs, plan.stream, plan.include_usage) == (
        17,
        ("END",),
        True,
        True,
        True,
    )
    assert plan.tools == TOOLS and plan.parse_tool_calls
    assert plan.notes == [
        "temperature=0.2 overridden by the run's sampling",
        "top_p=0.9 overridden by the run's sampling",
        "seed=3 overridden by the run's sampling",
        "frobnicate ignored",
    ]
    assert not plan_chat_request({"messages": ASK, "tools": TOOLS, "tool_choice": "none"}).parse_tool_calls
    assert plan_chat_request({"messages": ASK, "max_completion_tokens": 5, "n": 1}).max_tokens == 5


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("n", 2, r"n=2 is not supported.*raise rollout.group_size"),
        ("presence_penalty", 0.5, r"presence_penalty=0.5 is not supported.*logprobs"),
        ("logit_bias", {"1": 5}, r"logit_bias.*without changing its recorded logprobs"),
        ("top_logprobs", 3, r"top_logprobs=3"),
        ("response_format", {"type": "json_object"}, r"constrained decoding"),
        ("tool_choice", "required", r"tool_choice 'required' is not supported.*use 'auto'"),
        ("functions", [{"name": "f"}], r"send tools="),
        ("max_tokens", 0, r"max_tokens=0 must be an integer >= 1"),
        ("stop", [""], r"non-empty strings"),
    ],
)
def test_settings_that_would_make_logprobs_lie_are_refused_by_name(field: str, value: object, expected: str) -> None:
    with pytest.raises(OpenAIRequestError, match=expected):
        plan_chat_request({"messages": ASK, field: value})


def test_messages_are_canonicalised_and_bad_ones_named() -> None:
    [system, user, assistant, tool] = canonical_messages(
        [
            {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "user", "content": "q", "name": "ann", "extra": 1},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {}}}],
            },
            {"role": "tool", "content": "7", "tool_call_id": "c1"},
        ]
    )
    assert system == {"role": "system", "content": "ab"} and user == {"role": "user", "content": "q", "name": "ann"}
    assert assistant["content"] == "" and assistant["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}
    assert tool == {"role": "tool", "content": "7", "tool_call_id": "c1"}
    with pytest.raises(OpenAIRequestError, match="message 0 has role 'bot'"):
        canonical_messages([{"role": "bot", "content": "x"}])
    with pytest.raises(OpenAIRequestError, match="'image_url' content part"):
        canonical_messages([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])


def _reply(transcript: Transcript, text: str, tools: bool) -> dict:
    plan = plan_chat_request({"messages": transcript.expected, "tools": TOOLS if tools else []})
    body = completion(text, plan, len(transcript.replies), "m", None, None)
    transcript.record_reply(body["choices"][0]["message"], text)
    return body["choices"][0]["message"]


def test_a_request_that_repeats_the_history_adds_only_its_new_messages() -> None:
    transcript = Transcript()
    opening = transcript.admit(canonical_messages(ASK), TOOLS)
    assert opening.messages == ASK and opening.rewrite is None
    sampled = "Let me call it.\n" + format_tool_call("f", {"x": 1})
    message = _reply(transcript, sampled, tools=True)
    assert message["content"] == "Let me call it." and message["tool_calls"][0]["id"] == "call_0_0"
    # the agent sends our reply back its own way (the openai client's model_dump), then a tool result
    back = {**message, "content": "Let me call it.  ", "tool_calls": [{**message["tool_calls"][0], "id": "other"}]}
    admitted = transcript.admit(canonical_messages([*ASK, back, {"role": "tool", "content": "7"}]), TOOLS)
    assert admitted.rewrite is None and admitted.messages == [{"role": "tool", "content": "7"}]
    assert transcript.templated[2] == {"role": "assistant", "content": sampled}  # as sampled, not as re-serialised


def test_a_rewritten_history_is_a_rewrite_with_its_reason_and_sampled_replies_kept() -> None:
    transcript = Transcript()
    transcript.admit(canonical_messages(ASK), [])
    message = _reply(transcript, " first answer\n", tools=False)
    more = [{"role": "user", "content": "more"}, {"role": "user", "content": "please"}]
    dropped = transcript.admit(canonical_messages([ASK[0], message, *more]), [])  # the user question is gone
    assert dropped.rewrite == "message 1 (assistant) differs from the one the episode holds"
    assert dropped.messages[1] == {"role": "assistant", "content": " first answer\n"}  # the sampled text
    _reply(transcript, "second", tools=False)
    shorter = transcript.admit(canonical_messages(ASK), [])
    assert shorter.rewrite is not None and "no more than the 5 the episode already holds" in shorter.rewrite
    retooled = transcript.admit(canonical_messages([*ASK, {"role": "user", "content": "x"}]), TOOLS)
    assert retooled.rewrite is not None and "other tools" in retooled.rewrite
    with pytest.raises(GatewayRequestError, match="prefill"):
        transcript.admit(canonical_messages([*ASK, {"role": "assistant", "content": "Sure,"}]), TOOLS)


def test_replies_cut_stop_strings_number_tool_calls_and_stream() -> None:
    assert cut_at_stop("abc STOP def END", ["END", "STOP"]) == "abc " and cut_at_stop("abc", ["x"]) == "abc"
    from agentrl.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    text = "ok\n" + format_tool_call("f", {"x": 1}) + "\nObservation: tail"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    sampled = SampledTurn(ids, [-0.25] * len(ids), [0] * 3 + [1] * (len(ids) - 3), 11, "stop")
    plan = plan_chat_request({"messages": ASK, "tools": TOOLS, "stop": ["Observation:"], "logprobs": True})
    body = completion(text, plan, 4, "policy", sampled, tokenizer)
    [choice] = body["choices"]
    assert choice["message"]["content"] == "ok" and choice["finish_reason"] == "tool_calls"
    assert [c["id"] for c in choice["message"]["tool_calls"]] == ["call_4_0"]
    assert len(choice["logprobs"]["content"]) == len(ids) and body["metadata"]["weight_version"] == "1"
    assert body["usage"] == {
        "prompt_tokens": 11,
        "completion_tokens": len(ids),
        "total_tokens": 11 + len(ids),
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    events = chat_stream_events(body, True)
    chunks = [json.loads(e[len(b"data: ") :]) for e in events[:-1]]
    assert events[-1] == b"data: [DONE]\n\n" and chunks[0]["choices"][0]["delta"]["content"] == "ok"
    assert chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "f"
    assert chunks[2]["choices"][0]["finish_reason"] == "tool_calls" and chunks[3]["usage"]["completion_tokens"]


def test_agent_outcomes_are_plain_finite_numbers() -> None:
    assert outcome_of(True, "a").reward == 1.0 and outcome_of(0, "a").reward == 0.0
    full = outcome_of({"reward": 0.5, "reward_components": {"x": 1}, "success": False}, "a")
    assert (full.reward, full.reward_components, full.success) == (0.5, {"x": 1.0}, False)
    for bad, expected in [
        (math.nan, "finite number"),
        ("1.0", r"'1.0' \(a str\)"),
        (None, "None"),
        ({"score": 1}, "with 'reward'"),
        ({"reward": 1, "success": "yes"}, "true or false"),
        ({"reward": 1, "reward_components": {"x": "1"}}, r"reward_components\['x'\]"),
    ]:
        with pytest.raises(AgentGatewayError, match=expected):
            outcome_of(bad, "agent a")


def test_config_shorthands_and_task_files(tmp_path) -> None:
    cfg = AgentGatewayConfig(agent="gateway_agents:calc_agent", tasks=[{"task_id": "a"}])
    assert isinstance(cfg.agent, PythonAgentConfig) and cfg.agent.entry == "gateway_agents:calc_agent"
    cmd = AgentGatewayConfig(agent=["python", "agent.py"], tasks=[{"task_id": "a"}])
    assert isinstance(cmd.agent, CommandAgentConfig) and cmd.agent.task_input == "stdin"
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"task_id": "t1", "q": 1}\n\n{"task_id": "t2"}\n')
    assert list(load_tasks(str(path))) == ["t1", "t2"]
    path.write_text('{"task_id": "t1"}\n{"task_id": "t1"}\n')
    with pytest.raises(ConfigError, match="appears twice"):
        load_tasks(str(path))
    path.write_text("{oops\n")
    with pytest.raises(ConfigError, match=r"tasks.jsonl:1 is not JSON"):
        load_tasks(str(path))
    with pytest.raises(ConfigError, match="no string task_id"):
        load_tasks([{"id": "x"}])
    with pytest.raises(ConfigError, match="cannot import the agent module 'no_such_agent_module'"):
        PythonAgentConfig(entry="no_such_agent_module:agent").program()
    with pytest.raises(ConfigError, match="has no function 'nope'"):
        PythonAgentConfig(entry="gateway_agents:nope").program()
    with pytest.raises(ConfigError, match="must accept \\(client, task\\)"):
        PythonAgentConfig(entry="gateway_agents:run_tool").program()
