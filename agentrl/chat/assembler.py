"""Chat assembly: render a tokenizer's chat template to text and tokens, with tools and stop ids.

Invariant: text is tokenized without extra special tokens (the template writes its own BOS),
and every piece of text the assembler tokenizes decodes back to exactly that text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Literal

from agentrl.chat.messages import Message
from agentrl.errors import TemplateError

TemplateMismatch = Literal["error", "new_segment"]

# Tokens that end an assistant turn in common chat formats (ChatML, Llama 3, Phi, Gemma).
_END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")
_TEMPLATE_MISMATCH_MODES = ("error", "new_segment")


def _template_source(tokenizer: Any) -> str:
    """The tokenizer's chat template as one string (a dict of named templates is joined)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        return "\n".join(f"{name}:{text}" for name, text in sorted(template.items()))
    return template or ""


def fingerprint(tokenizer: Any) -> dict[str, Any]:
    """Hashes identifying a tokenizer (vocab, merges, added tokens) and its chat template.

    The single definition of these hashes: ``agentrl.rollout.fingerprint.rollout_fingerprints`` adds
    architecture and logprob semantics, and the rollout buffer refuses to resume under another setup.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        # Only the model and added tokens: padding/truncation settings change at runtime.
        vocab_blob = json.dumps({"model": spec.get("model"), "added_tokens": spec.get("added_tokens")}, sort_keys=True)
    else:
        vocab_blob = json.dumps(sorted(tokenizer.get_vocab().items()))
    return {
        "tokenizer_sha256": hashlib.sha256(vocab_blob.encode()).hexdigest(),
        "chat_template_sha256": hashlib.sha256(_template_source(tokenizer).encode()).hexdigest(),
        "vocab_size": len(tokenizer),
    }


def tools_system_prompt(schemas: Sequence[dict[str, Any]]) -> str:
    """The Qwen/Hermes tools section of a system prompt, for templates without tool support."""
    lines = "\n".join(json.dumps(schema, ensure_ascii=False) for schema in schemas)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{lines}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def with_tools_prompt(messages: Sequence[Message], schemas: Sequence[dict[str, Any]]) -> list[Message]:
    """Messages with the tools prompt appended to the system message (one is prepended when absent)."""
    if not schemas:
        return list(messages)
    prompt = tools_system_prompt(schemas)
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0]['content']}\n\n{prompt}"
    else:
        out.insert(0, {"role": "system", "content": prompt})
    return out


_PROBE_NAME = "agentrl_probe_tool_7f3a"


def template_supports_tools(tokenizer: Any) -> bool:
    """True when the tokenizer's chat template renders a ``tools=`` list (probed with a sentinel tool)."""
    probe = {
        "type": "function",
        "function": {"name": _PROBE_NAME, "description": "probe", "parameters": {"type": "object", "properties": {}}},
    }
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=[probe], tokenize=False)
    except Exception:  # noqa: BLE001 - any template failure on tools= means "no tool support"
        return False
    return isinstance(text, str) and _PROBE_NAME in text


class ChatAssembler:
    """Renders chats with a tokenizer's template and tokenizes them; knows the end-of-turn ids.

    ``tools`` are JSON schemas: passed to the template when it renders them, else described in
    the system message (``with_tools_prompt``). ``template_mismatch`` says what a
    ``TokenLedger`` does when the template cannot extend the history as an exact prefix.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        tools: list[dict[str, Any]] | None = None,
        template_mismatch: TemplateMismatch = "error",
        template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if not _template_source(tokenizer):
            raise TemplateError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; "
                "set tokenizer.chat_template (e.g. a ChatML template) or use an instruct model's tokenizer"
            )
        if template_mismatch not in _TEMPLATE_MISMATCH_MODES:
            raise TemplateError(
                f"template_mismatch={template_mismatch!r} is not one of {_TEMPLATE_MISMATCH_MODES}; "
                "set rollout.template_mismatch to 'error' or 'new_segment'"
            )
        self.tokenizer = tokenizer
        self.tools = list(tools or [])
        self.template_mismatch: TemplateMismatch = template_mismatch
        self.template_kwargs = dict(template_kwargs or {})
        self.template_has_tools = bool(self.tools) and template_supports_tools(tokenizer)
        self.stop_token_ids: tuple[int, ...] = self._find_stop_token_ids()

    def _find_stop_token_ids(self) -> tuple[int, ...]:
        """EOS plus the known end-of-turn tokens present in the vocabulary, EOS first."""
        vocab = self.tokenizer.get_vocab()
        ids: list[int] = []
        eos = self.tokenizer.eos_token_id
        if isinstance(eos, int):
            ids.append(eos)
        ids.extend(vocab[token] for token in _END_OF_TURN_TOKENS if token in vocab and vocab[token] not in ids)
        if not ids:
            raise TemplateError(
                f"tokenizer {getattr(self.tokenizer, 'name_or_path', '?')!r} has no EOS or end-of-turn token; "
                "set tokenizer.eos_token to the token that ends an assistant turn (e.g. '<|im_end|>')"
            )
        return tuple(ids)

    def _with_tools(self, messages: list[Message]) -> list[Message]:
        """Describe the tools in the system message when the template cannot render them itself."""
        if not self.tools or self.template_has_tools:
            return messages
        return with_tools_prompt(messages, self.tools)

    def render(self, messages: list[Message], *, add_generation_prompt: bool) -> str:
        """The chat template's text for ``messages`` (tools included), optionally with the generation prompt."""
        kwargs = dict(self.template_kwargs)
        if self.tools and self.template_has_tools:
            kwargs["tools"] = self.tools
        try:
            text = self.tokenizer.apply_chat_template(
                self._with_tools(messages), add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs
            )
        except Exception as exc:  # jinja raises many types (TemplateError, TypeError...) for bad chats
            roles = [m.get("role") for m in messages]
            raise TemplateError(f"chat template failed to render messages with roles {roles}: {exc}") from exc
        if not isinstance(text, str):
            raise TemplateError(
                f"apply_chat_template returned {type(text).__name__}, expected str; upgrade transformers"
            )
        return text

    def encode(self, text: str) -> list[int]:
        """Tokens of rendered template text (special tokens parsed, none added); must decode back to ``text``."""
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        if self.decode(ids) != self._normalized(text):
            raise TemplateError(
                f"tokenizer does not round-trip rendered text {text[:80]!r}: decoding its tokens gives "
                f"{self.decode(ids)[:80]!r}; use a byte-level BPE tokenizer (Qwen, Llama 3, SmolLM2)"
            )
        return ids

    def _normalized(self, text: str) -> str:
        """``text`` as the tokenizer's normalizer (e.g. Qwen's NFC) sees it; tokens encode that form."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        normalizer = getattr(backend, "normalizer", None)
        return normalizer.normalize_str(text) if normalizer is not None else text

    def decode(self, ids: list[int]) -> str:
        """Text of ``ids`` with special tokens kept and no whitespace clean-up."""
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """Tokens of the opening messages followed by the assistant generation prompt."""
        return self.encode(self.render(messages, add_generation_prompt=True))
