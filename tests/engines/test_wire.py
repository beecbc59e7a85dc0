"""SGLang wire format: hand-written /generate reply bodies shaped after SGLang 0.5.x
(docs/engines.md#sglangs-generate-api;
not captured from a running server, which cannot run on these CPUs) parsed by the client, and sampling_params /
server_info checks."""

from __future__ import annotations

import pytest

from agentrl.engines.base import SamplingParams
from agentrl.engines.sglang.settings import INVISIBLE_SETTINGS, check_request, read_settings
from agentrl.engines.sglang.wire import parse_reply, sampling_from_json, sampling_to_json, version_from_wire
from agentrl.errors import EngineConfigError, EngineError

RID = "8c5f0d2a9b6e4f1a8d3c7b2e1f0a9c8d"


def _meta(finish: dict, n: int, **extra: object) -> dict:
    return {
        "id": RID,
        "finish_reason": finish,
        "prompt_tokens": 7,
        "completion_tokens": n,
        "cached_tokens": 3,
        "weight_version": "4",
        **extra,
    }


NORMAL_STOP = {
    "text": " hello",
    "output_ids": [2213, 151645],
    "meta_info": _meta(
        {"type": "stop", "matched": 151645},
        2,
        output_token_logprobs=[[-0.25, 2213, None], [-0.0078125, 151645, None]],
        output_token_logprobs_length=2,
        e2e_latency=0.12,
    ),
}
LENGTH = {
    "text": "a b c",
    "output_ids": [64, 293, 272],
    "meta_info": _meta(
        {"type": "length", "length": 3},
        3,
        output_token_logprobs=[[-1.5, 64, None], [-2.0, 293, None], [-0.5, 272, None]],
    ),
}
STOP_STRING = {
    "text": "x = 1",
    "output_ids": [87, 284, 220, 16, 198],
    "meta_info": _meta(
        {"type": "stop", "matched": "\n"},
        5,
        output_token_logprobs=[
            [-0.1, 87, None],
            [-0.2, 284, None],
            [-0.3, 220, None],
            [-0.4, 16, None],
            [-0.5, 198, None],
        ],
    ),
}
ABORT_RUNNING = {
    "text": "partial",
    "output_ids": [4, 5, 6],
    "meta_info": _meta(
        {"type": "abort", "message": "Abort request", "status_code": None, "err_type": None},
        3,
        output_token_logprobs=[[-1.0, 4, None], [-1.25, 5, None], [-3.5, 6, None]],
    ),
}
ABORT_QUEUED_05 = {
    "text": "",
    "output_ids": [],
    "meta_info": _meta(
        {"type": "abort", "message": "Abort in waiting queue", "status_code": None, "err_type": None},
        0,
        output_token_logprobs=[],
    ),
}
ABORT_QUEUED_04 = {
    "text": "",
    "meta_info": {
        "id": RID,
        "finish_reason": {"type": "abort", "message": "Abort before prefill"},
        "prompt_tokens": 0,
        "completion_tokens": 0,
    },
}
TWO_VERSIONS = {
    "text": "",
    "output_ids": [10, 11, 12, 13],
    "meta_info": _meta(
        {"type": "length", "length": 4},
        4,
        output_token_logprobs=[[-1.0, 10, None], [-1.0, 11, None], [-1.0, 12, None], [-1.0, 13, None]],
        weight_versions=[{"version": "3", "start": 0, "end": 1}, {"version": "4", "start": 1, "end": 4}],
    ),
}


def _parse(body: dict):
    return parse_reply(body, request_id=RID, prompt_len=7, source="http://srv:30000")


def test_normal_stop_reply() -> None:
    result = _parse(NORMAL_STOP)
    assert result.output_ids == [2213, 151645] and result.logprobs == [-0.25, -0.0078125]
    assert result.finish_reason == "stop" and result.matched_stop == 151645
    assert (result.prompt_tokens, result.cached_tokens) == (7, 3)
    assert result.token_versions() == [4, 4]


def test_length_and_stop_string_replies() -> None:
    assert _parse(LENGTH).finish_reason == "length" and len(_parse(LENGTH).logprobs) == 3
    result = _parse(STOP_STRING)
    assert result.finish_reason == "stop" and result.matched_stop == "\n" and result.output_ids[-1] == 198


def test_abort_while_running_keeps_partial_tokens() -> None:
    result = _parse(ABORT_RUNNING)
    assert result.finish_reason == "abort" and result.output_ids == [4, 5, 6] and result.logprobs == [-1.0, -1.25, -3.5]


@pytest.mark.parametrize(
    "body", [ABORT_QUEUED_05, ABORT_QUEUED_04], ids=["0.5-with-logprob-keys", "0.4-no-logprob-keys"]
)
def test_queued_abort_is_zero_tokens(body: dict) -> None:
    result = _parse(body)
    assert result.finish_reason == "abort" and result.output_ids == [] and result.logprobs == []
    assert result.extra["message"] in ("Abort in waiting queue", "Abort before prefill")


def test_batch_reply_items_parse_independently() -> None:
    batch = [NORMAL_STOP, LENGTH, ABORT_QUEUED_05]
    results = [_parse(item) for item in batch]
    assert [r.finish_reason for r in results] == ["stop", "length", "abort"]


def test_weight_version_spans_are_used() -> None:
    result = _parse(TWO_VERSIONS)
    assert result.token_versions() == [3, 4, 4, 4]


def test_ids_mismatch_and_missing_logprobs_are_errors() -> None:
    bad = {**LENGTH, "output_ids": [64, 293, 999]}
    with pytest.raises(EngineError, match="differ from output_ids"):
        _parse(bad)
    no_lp = {"output_ids": [1], "meta_info": _meta({"type": "length", "length": 1}, 1)}
    with pytest.raises(EngineError, match="return_logprob"):
        _parse(no_lp)


def test_sampling_params_round_trip_and_refusals() -> None:
    params = SamplingParams(max_new_tokens=9, temperature=0.7, stop_token_ids=(5,), stop=("\n",), seed=3)
    body = sampling_to_json(params)
    assert body["sampling_seed"] == 3 and body["stop"] == ["\n"]
    assert sampling_from_json(body) == params
    with pytest.raises(EngineError, match="repetition_penalty"):
        sampling_from_json({"repetition_penalty": 1.2})
    with pytest.raises(EngineError, match="unknown sampling_params"):
        sampling_from_json({"temprature": 1.0})


def test_weight_version_strings() -> None:
    assert version_from_wire("default") == 0 and version_from_wire("12") == 12
    with pytest.raises(EngineError, match="--weight-version"):
        version_from_wire("v1-final")


def test_server_settings_from_sglang_server_info() -> None:
    """Keys as SGLang 0.5.23's /server_info names them (resolved ServerArgs fields + version)."""
    info = {"version": "0.5.23", "tp_size": 2, "dp_size": 1, "weight_version": "default", "skip_tokenizer_init": False}
    settings = read_settings("http://a:1", info)
    assert (settings.tp_size, settings.skip_tokenizer_init) == (2, False)
    assert "tp_size 2" in settings.describe() and "log_softmax(logits / T)" in settings.describe()
    on_policy = read_settings("http://a:1", {**info, "rl_on_policy_target": "fsdp"})
    assert "rl_on_policy_target fsdp" in on_policy.describe()
    with pytest.raises(EngineConfigError, match="no server information"):
        read_settings("http://a:1", {"router_manager": True})
    with pytest.raises(EngineConfigError, match=">= 0.5.1"):
        read_settings("http://a:1", {**info, "version": "0.4.10"})
    with pytest.raises(EngineError, match="--weight-version"):
        read_settings("http://a:1", {**info, "weight_version": "final"})
    tokenless = read_settings("http://a:1", {**info, "skip_tokenizer_init": True})
    check_request(tokenless, ())
    with pytest.raises(EngineConfigError, match="--skip-tokenizer-init"):
        check_request(tokenless, ("\n",))
    assert "not visible over HTTP" in INVISIBLE_SETTINGS and "SGLANG_RETURN_ORIGINAL_LOGPROB" in INVISIBLE_SETTINGS
