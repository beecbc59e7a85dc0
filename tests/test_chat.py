"""ChatAssembler: template rendering, tool instructions, stop ids and tokenizer fingerprints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from agentrl.chat import ChatAssembler, fingerprint
from agentrl.errors import TemplateError

TEMPLATES = Path(__file__).parent / "fixtures" / "chat_templates"
ADD_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


@pytest.fixture()
def tokenizer(tiny_model_dir: Path) -> Any:
    """A fresh copy of the tiny model's ChatML tokenizer (tests may change its template)."""
    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_prompt_ids_match_the_template_and_end_with_the_generation_prompt(tokenizer: Any) -> None:
    assembler = ChatAssembler(tokenizer)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Sum 2 and 3, s'il vous plaît é ü 你好"},
    ]
    ids = assembler.prompt_ids(messages)
    expected_text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert ids == tokenizer(expected_text, add_special_tokens=False)["input_ids"]
    assert assembler.decode(ids) == expected_text
    assert expected_text.endswith("<|im_start|>assistant\n")


def test_stop_token_ids_start_with_the_end_of_turn_token(tokenizer: Any) -> None:
    assembler = ChatAssembler(tokenizer)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert assembler.stop_token_ids[0] == im_end
    assert tokenizer.convert_tokens_to_ids("<|endoftext|>") in assembler.stop_token_ids
    assert len(set(assembler.stop_token_ids)) == len(assembler.stop_token_ids)


def test_tools_are_described_in_the_system_message_when_the_template_has_no_tool_support(tokenizer: Any) -> None:
    assembler = ChatAssembler(tokenizer, tools=[ADD_SCHEMA])
    assert not assembler.template_has_tools
    with_system = assembler.render(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], add_generation_prompt=True
    )
    assert with_system.startswith("<|im_start|>system\nBe brief.\n\n")
    assert '"name": "add"' in with_system and "<tool_call>" in with_system
    without_system = assembler.render([{"role": "user", "content": "hi"}], add_generation_prompt=False)
    assert without_system.startswith("<|im_start|>system\n") and '"name": "add"' in without_system
    assert without_system.endswith("<|im_start|>user\nhi<|im_end|>\n")


def test_tools_go_to_a_template_that_supports_them(tokenizer: Any) -> None:
    tokenizer.chat_template = (TEMPLATES / "chatml_tools.jinja").read_text()
    assembler = ChatAssembler(tokenizer, tools=[ADD_SCHEMA])
    assert assembler.template_has_tools
    text = assembler.render(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n\n<tools>\n{")
    assert '"name": "add"' in text and "You may call one or more functions" not in text
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_fingerprint_is_stable_and_changes_with_template_or_vocab(tiny_model_dir: Path) -> None:
    first = fingerprint(AutoTokenizer.from_pretrained(tiny_model_dir))
    second_tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    second_tok.model_max_length = 7  # runtime settings do not change the identity
    assert fingerprint(second_tok) == first
    assert first["vocab_size"] == len(second_tok)
    retemplated = AutoTokenizer.from_pretrained(tiny_model_dir)
    retemplated.chat_template = (TEMPLATES / "think_stripping.jinja").read_text()
    changed = fingerprint(retemplated)
    assert changed["chat_template_sha256"] != first["chat_template_sha256"]
    assert changed["tokenizer_sha256"] == first["tokenizer_sha256"]
    grown = AutoTokenizer.from_pretrained(tiny_model_dir)
    grown.add_tokens(["<extra_token>"])
    assert fingerprint(grown)["tokenizer_sha256"] != first["tokenizer_sha256"]


def test_missing_template_and_bad_mismatch_mode_are_clear_errors(tokenizer: Any) -> None:
    with pytest.raises(TemplateError, match="template_mismatch='patch'.*'error' or 'new_segment'"):
        ChatAssembler(tokenizer, template_mismatch="patch")  # type: ignore[arg-type]
    tokenizer.chat_template = None
    with pytest.raises(TemplateError, match="has no chat template; set tokenizer.chat_template"):
        ChatAssembler(tokenizer)


def test_a_template_that_rejects_a_chat_raises_template_error_naming_the_roles(tokenizer: Any) -> None:
    tokenizer.chat_template = (
        "{%- for m in messages %}{%- if m.role == 'tool' %}{{ raise_exception('no tool role') }}{%- endif %}"
        "{{- m.content }}{%- endfor %}"
    )
    assembler = ChatAssembler(tokenizer)
    with pytest.raises(TemplateError, match=r"roles \['user', 'tool'\].*no tool role"):
        assembler.render(
            [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}], add_generation_prompt=False
        )


def test_template_kwargs_reach_the_template(tokenizer: Any) -> None:
    tokenizer.chat_template = (
        "{%- for m in messages %}{{- m.content }}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
        "{%- if enable_thinking is defined and not enable_thinking %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif "
        "%}{%- endif %}"
    )
    plain = ChatAssembler(tokenizer).render([{"role": "user", "content": "q"}], add_generation_prompt=True)
    no_think = ChatAssembler(tokenizer, template_kwargs={"enable_thinking": False})
    assert plain == "q<|im_start|>assistant\n"
    assert no_think.render([{"role": "user", "content": "q"}], add_generation_prompt=True).endswith("</think>\n\n")


def test_encode_accepts_the_tokenizers_unicode_normalization_but_rejects_lossy_tokenizers(tokenizer: Any) -> None:
    from tokenizers import normalizers

    assembler = ChatAssembler(tokenizer)
    tokenizer.backend_tokenizer.normalizer = normalizers.NFC()  # as Qwen's tokenizer.json does
    decomposed = "cafe\u0301"
    assert assembler.decode(assembler.encode(decomposed)) == "caf\u00e9"
    tokenizer.backend_tokenizer.normalizer = None
    tokenizer.backend_tokenizer.decoder = None  # decoding no longer maps byte-level tokens back to text
    with pytest.raises(TemplateError, match="does not round-trip rendered text 'Ab é'"):
        assembler.encode("Ab é")
