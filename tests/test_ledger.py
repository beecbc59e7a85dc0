"""TokenLedger: incremental template rendering, verbatim sampled tokens, and template mismatches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.chat import ChatAssembler
from agentrl.errors import RolloutError, TemplateError
from agentrl.trajectory import Episode
from agentrl.trajectory.ledger import TokenLedger

TEMPLATES = Path(__file__).parent / "fixtures" / "chat_templates"
OPENING = [
    {"role": "system", "content": "You add numbers. Réponds vite."},
    {"role": "user", "content": "What is 2 + 3?"},
]


@pytest.fixture()
def tokenizer(tiny_model_dir: Path) -> Any:
    """A fresh copy of the tiny model's ChatML tokenizer (tests may change its template)."""
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def with_template(tokenizer: Any, name: str) -> Any:
    """The tokenizer with one of the test templates in tests/fixtures/chat_templates."""
    tokenizer.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    return tokenizer


def new_ledger(assembler: ChatAssembler, opening: list[dict[str, Any]] = OPENING) -> TokenLedger:
    """A started ledger on a fresh episode."""
    ledger = TokenLedger(Episode(episode_id="ep0", task_id="t0", group_id="g0"), assembler)
    ledger.start(opening)
    return ledger


def float32_logprobs(n: int, offset: int = 0) -> list[float]:
    """Engine-like logprobs: float32 values with many significant digits."""
    return [float(np.float32(-0.0123456789 * (i + 1 + offset) - 1e-7)) for i in range(n)]


def play_turn(
    ledger: TokenLedger, ids: list[int], turn: int, env: list[dict[str, Any]] | None, version: int = 3
) -> str:
    """One assistant turn: append the sampled ids, end the turn, then append the env's messages."""
    ledger.append_sampled(ids, float32_logprobs(len(ids), offset=turn), [version] * len(ids), turn)
    text = ledger.decode_turn(ids)
    ledger.end_turn(text)
    if env is not None:
        ledger.append_env(env)
    return text


def test_incremental_rendering_equals_the_full_render(tokenizer: Any) -> None:
    assembler = ChatAssembler(tokenizer)
    ledger = new_ledger(assembler)
    stop = assembler.stop_token_ids[0]
    play_turn(
        ledger,
        assembler.encode('<tool_call>{"name": "add"}</tool_call>') + [stop],
        0,
        [{"role": "tool", "content": "5"}],
    )
    play_turn(
        ledger, assembler.encode("The answer is 5.") + [stop], 1, [{"role": "user", "content": "Now 7 × 6, ça va?"}]
    )
    full_text = assembler.render(ledger.episode.messages, add_generation_prompt=True)
    assert ledger.input_ids() == tokenizer(full_text, add_special_tokens=False)["input_ids"]
    assert assembler.decode(ledger.input_ids()) == full_text
    seg = ledger.segment
    assert seg.input_ids == ledger.input_ids()
    env_positions = [i for i, m in enumerate(seg.loss_mask) if m == 0]
    assert all(seg.logprobs[i] == 0.0 and seg.turn_ids[i] == -1 and seg.versions[i] == -1 for i in env_positions)
    assert sorted(set(seg.turn_ids)) == [-1, 0, 1]
    assert [m["role"] for m in ledger.episode.messages] == ["system", "user", "assistant", "tool", "assistant", "user"]


def test_sampled_tokens_are_kept_verbatim_even_when_not_canonical_or_not_utf8(tokenizer: Any) -> None:
    assembler = ChatAssembler(tokenizer)
    ledger = new_ledger(assembler)
    letters = tokenizer.convert_tokens_to_ids(list("hello"))
    e_acute = tokenizer.convert_tokens_to_ids(["Ã", "©"])  # byte-level tokens of the UTF-8 bytes C3 A9
    assert assembler.decode([e_acute[0]]) == "\ufffd"  # the first byte alone is not valid UTF-8
    sampled = letters + [e_acute[0]]
    resumed = [e_acute[1], assembler.stop_token_ids[0]]
    assert assembler.encode("helloé") != letters + e_acute  # a re-tokenization would merge them
    prompt_len = len(ledger.input_ids())
    ledger.append_sampled(sampled, float32_logprobs(len(sampled)), [3] * len(sampled), 0)
    ledger.append_sampled(resumed, float32_logprobs(2, offset=9), [4, 4], 0)  # resumed after an abort
    text = ledger.decode_turn(ledger.current_turn_ids())
    assert text == "helloé"
    ledger.end_turn(text)
    ledger.append_env([{"role": "user", "content": "more"}])
    seg = ledger.segment
    assert seg.completion_ids[: len(sampled) + 2] == sampled + resumed
    assert seg.logprobs[: len(sampled) + 2] == float32_logprobs(len(sampled)) + float32_logprobs(2, offset=9)
    assert seg.versions[: len(sampled) + 2] == [3] * len(sampled) + [4, 4]
    assert assembler.decode(ledger.input_ids()) == assembler.render(ledger.episode.messages, add_generation_prompt=True)
    restored = Episode.model_validate_json(ledger.episode.model_dump_json())
    assert restored.segment.completion_ids == seg.completion_ids and restored.segment.logprobs == seg.logprobs
    assert restored.segment.input_ids[prompt_len : prompt_len + len(sampled) + 2] == sampled + resumed


def test_turn_cut_by_max_new_tokens_gets_the_end_of_turn_glue_as_template_tokens(tokenizer: Any) -> None:
    assembler = ChatAssembler(tokenizer)
    ledger = new_ledger(assembler)
    sampled = assembler.encode("The answer is")  # no stop token: finish_reason "length"
    play_turn(ledger, sampled, 0, [{"role": "user", "content": "Go on."}])
    seg = ledger.segment
    after = len(sampled)
    assert seg.completion_ids[after] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert seg.loss_mask[after:] == [0] * (len(seg.loss_mask) - after)
    assert assembler.decode(ledger.input_ids()) == assembler.render(ledger.episode.messages, add_generation_prompt=True)


def test_turn_ended_by_a_stop_string_or_another_eos_is_closed_the_template_way(tokenizer: Any) -> None:
    assembler = ChatAssembler(tokenizer)
    ledger = new_ledger(assembler)
    play_turn(ledger, assembler.encode("```python\nx = 1\n```"), 0, [{"role": "user", "content": "ok"}])
    assert assembler.decode(ledger.input_ids()) == assembler.render(ledger.episode.messages, add_generation_prompt=True)
    endoftext = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    text = play_turn(ledger, assembler.encode("done") + [endoftext], 1, [{"role": "user", "content": "bye"}])
    assert text == "done"
    assert assembler.decode(ledger.input_ids()).endswith(
        "done<|endoftext|><|im_end|>\n<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tool_results_with_a_tool_aware_template_extend_the_history(tokenizer: Any) -> None:
    assembler = ChatAssembler(
        with_template(tokenizer, "chatml_tools"), tools=[{"type": "function", "function": {"name": "add"}}]
    )
    ledger = new_ledger(assembler)
    call = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
    play_turn(
        ledger,
        assembler.encode(call) + [assembler.stop_token_ids[0]],
        0,
        [{"role": "tool", "content": "5"}, {"role": "tool", "content": "ok"}],
    )
    full_text = assembler.render(ledger.episode.messages, add_generation_prompt=True)
    assert (
        "<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\nok\n</tool_response><|im_end|>"
        in full_text
    )
    assert ledger.input_ids() == assembler.encode(full_text)


def thinking_turns(ledger: TokenLedger) -> None:
    """Two thinking turns separated by a tool result (which does not trigger stripping)."""
    stop = ledger.assembler.stop_token_ids[0]
    play_turn(
        ledger,
        ledger.assembler.encode("<think>\nadd them\n</think>\n\n<tool_call>{}</tool_call>") + [stop],
        0,
        [{"role": "tool", "content": "5"}],
    )
    play_turn(ledger, ledger.assembler.encode("<think>\ncheck\n</think>\n\nIt is 5.") + [stop], 1, None)


def test_think_stripping_template_is_detected_in_error_mode(tokenizer: Any) -> None:
    assembler = ChatAssembler(with_template(tokenizer, "think_stripping"), template_mismatch="error")
    ledger = new_ledger(assembler)
    thinking_turns(ledger)
    before = ledger.episode.model_copy(deep=True)
    with pytest.raises(TemplateError, match=r"strips <think>.*template_mismatch='new_segment'"):
        ledger.append_env([{"role": "user", "content": "And 7 + 8?"}])
    assert ledger.episode == before  # nothing appended, nothing patched


def test_think_stripping_template_starts_a_new_segment_in_new_segment_mode(tokenizer: Any) -> None:
    assembler = ChatAssembler(with_template(tokenizer, "think_stripping"), template_mismatch="new_segment")
    ledger = new_ledger(assembler)
    thinking_turns(ledger)
    first = ledger.segment.model_copy(deep=True)
    ledger.append_env([{"role": "user", "content": "And 7 + 8?"}])
    episode = ledger.episode
    assert len(episode.segments) == 2 and episode.segments[0] == first  # old tokens and logprobs untouched
    full_text = assembler.render(episode.messages, add_generation_prompt=True)
    assert "<think>" not in full_text
    assert (
        episode.segments[1].prompt_ids == assembler.encode(full_text)
        and ledger.input_ids() == episode.segments[1].prompt_ids
    )
    answer = assembler.encode("15") + [assembler.stop_token_ids[0]]
    play_turn(ledger, answer, 2, None)
    assert episode.segments[1].completion_ids == answer and episode.segments[1].turn_ids == [2] * len(answer)
    assert episode.min_version == 3


def test_a_template_that_reformats_the_sampled_turn_is_detected_in_both_modes(tokenizer: Any) -> None:
    for mode in ("error", "new_segment"):
        assembler = ChatAssembler(with_template(tokenizer, "think_always_stripped"), template_mismatch=mode)  # type: ignore[arg-type]
        ledger = new_ledger(assembler)
        ids = assembler.encode("<think>\nhmm\n</think>\n\n5")
        ledger.append_sampled(ids, [-1.0] * len(ids), [0] * len(ids), 0)
        ledger.end_turn(ledger.decode_turn(ids))
        if mode == "error":
            with pytest.raises(TemplateError, match="differently from what was sampled"):
                ledger.append_env([{"role": "user", "content": "next"}])
        else:
            ledger.append_env([{"role": "user", "content": "next"}])
            assert len(ledger.episode.segments) == 2 and ledger.episode.segments[0].completion_ids == ids


def test_plain_turns_with_the_think_stripping_template_stay_in_one_segment(tokenizer: Any) -> None:
    assembler = ChatAssembler(with_template(tokenizer, "think_stripping"), template_mismatch="error")
    ledger = new_ledger(assembler)
    for turn in range(3):
        play_turn(
            ledger,
            assembler.encode(f"answer {turn}") + [assembler.stop_token_ids[0]],
            turn,
            [{"role": "user", "content": f"q{turn}"}],
        )
    assert len(ledger.episode.segments) == 1
    assert ledger.input_ids() == assembler.encode(assembler.render(ledger.episode.messages, add_generation_prompt=True))


def test_a_ledger_rebuilt_from_a_serialized_episode_continues_identically(tokenizer: Any) -> None:
    assembler = ChatAssembler(tokenizer)
    ids = assembler.encode("It is 5.") + [assembler.stop_token_ids[0]]
    straight = new_ledger(assembler)
    play_turn(straight, ids, 0, [{"role": "user", "content": "thanks"}])
    ledger = new_ledger(assembler)
    ledger.append_sampled(ids[:2], float32_logprobs(2), [3, 3], 0)
    ledger = TokenLedger(Episode.model_validate_json(ledger.episode.model_dump_json()), ChatAssembler(tokenizer))
    ledger.append_sampled(ids[2:], float32_logprobs(len(ids))[2:], [3] * (len(ids) - 2), 0)
    ledger.end_turn(ledger.decode_turn(ledger.current_turn_ids()))
    ledger = TokenLedger(Episode.model_validate_json(ledger.episode.model_dump_json()), ChatAssembler(tokenizer))
    ledger.append_env([{"role": "user", "content": "thanks"}])
    assert ledger.episode == straight.episode
    assert ledger.stats() == {"segments": 1, "sampled_tokens": len(ids), "tokens": len(ledger.input_ids())}


def test_calls_out_of_order_or_misaligned_fail_with_the_fix(tokenizer: Any) -> None:
    assembler = ChatAssembler(tokenizer)
    fresh = TokenLedger(Episode(episode_id="e", task_id="t", group_id="g"), assembler)
    with pytest.raises(RolloutError, match="before start"):
        fresh.append_sampled([5], [-1.0], [0], 0)
    with pytest.raises(RolloutError, match="start\\(\\) got messages ending with an assistant message"):
        fresh.start([{"role": "user", "content": "q"}, {"role": "assistant", "content": "prefill"}])
    ledger = new_ledger(assembler)
    with pytest.raises(RolloutError, match="start\\(\\) is called once"):
        ledger.start(OPENING)
    with pytest.raises(RolloutError, match="got 2 ids, 1 logprobs and 2 versions"):
        ledger.append_sampled([5, 6], [-1.0], [0, 0], 0)
    with pytest.raises(RolloutError, match="call end_turn"):
        ledger.append_env([{"role": "user", "content": "x"}])
    ledger.append_sampled(
        assembler.encode("abc"), [-1.0] * len(assembler.encode("abc")), [0] * len(assembler.encode("abc")), 0
    )
    with pytest.raises(RolloutError, match="turn_index=1 but the open turn is 0"):
        ledger.append_sampled([5], [-1.0], [0], 1)
    with pytest.raises(RolloutError, match="differs from the sampled text 'abc'; pass ledger.decode_turn"):
        ledger.end_turn("abc stripped")
    ledger.end_turn("abc")
    with pytest.raises(RolloutError, match="call append_env"):
        ledger.append_sampled([5], [-1.0], [0], 1)


def test_real_model_samples_round_trip_through_the_ledger(tiny_model_dir: Path, tokenizer: Any) -> None:
    """Sample from the random-weight tiny model (arbitrary byte tokens) and keep them verbatim."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    assembler = ChatAssembler(tokenizer)
    ledger = new_ledger(assembler)
    generator = torch.Generator().manual_seed(0)
    sampled_turns: list[list[int]] = []
    for turn in range(2):
        ids, logprobs = [], []
        with torch.no_grad():
            for _ in range(8):
                logits = model(torch.tensor([ledger.input_ids() + ids])).logits[0, -1].float()
                logp = torch.log_softmax(logits, dim=-1)
                token = int(torch.multinomial(logp.exp(), 1, generator=generator))
                ids.append(token)
                logprobs.append(float(logp[token]))
                if token in assembler.stop_token_ids:
                    break
        start = len(ledger.segment.completion_ids)
        ledger.append_sampled(ids, logprobs, [turn] * len(ids), turn)
        ledger.end_turn(ledger.decode_turn(ids))
        ledger.append_env([{"role": "user", "content": f"turn {turn} done"}])
        seg = ledger.segment
        assert (
            seg.completion_ids[start : start + len(ids)] == ids and seg.logprobs[start : start + len(ids)] == logprobs
        )
        sampled_turns.append(ids)
    seg = ledger.segment
    assert [[t for t, k in zip(seg.completion_ids, seg.turn_ids) if k == turn] for turn in range(2)] == sampled_turns
    assert assembler.decode(seg.input_ids).endswith("<|im_start|>user\nturn 1 done<|im_end|>\n<|im_start|>assistant\n")
