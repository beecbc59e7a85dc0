"""An agent's chat history as the gateway checks it: does each request extend what the episode holds?

Requests carry OpenAI messages; the ledger holds chat-template messages with the assistant turns exactly
as sampled. The transcript keeps both views: ``expected`` (what the agent must send back: its earlier
messages and the replies the gateway gave) and ``templated`` (the same history for the chat template).
A request whose messages start with ``expected`` adds only its new messages (env tokens, mask 0); any
other request is a rewrite: the episode starts a new token segment, with the reason recorded. In a
rewritten history, an assistant message equal to one of the gateway's replies is rendered as the text
the policy sampled for it, never as the agent's re-serialisation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agentrl.chat.messages import Message
from agentrl.errors import GatewayRequestError
from agentrl.openai_api.requests import canonical_message
from agentrl.tools.toolcall import format_tool_call


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _calls_of(message: Message) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], _arguments(c["function"]["arguments"])) for c in message.get("tool_calls", [])]


def same_message(sent: Message, held: Message) -> bool:
    """Whether ``sent`` repeats ``held``: assistant messages modulo surrounding whitespace and tool-call ids."""
    if sent["role"] != held["role"]:
        return False
    if sent["role"] == "assistant":
        return sent["content"].strip() == held["content"].strip() and _calls_of(sent) == _calls_of(held)
    return sent == held


def _template_form(message: Message) -> Message:
    """A message as the chat template gets it: an assistant's tool calls written as Hermes blocks, as sampled."""
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    calls = [format_tool_call(name, args if isinstance(args, dict) else {}) for name, args in _calls_of(message)]
    if calls:
        out["content"] = "\n".join([message["content"].strip(), *calls]).strip("\n")
    return out


@dataclass
class Admission:
    """How a request's messages enter the episode: new messages, or a whole rewritten history."""

    messages: list[Message]
    rewrite: str | None = None  # why the history could not be extended (None: it was)
    opening: bool = False  # the conversation's first request


@dataclass
class Transcript:
    """The history one agent conversation holds (see the module docstring)."""

    expected: list[Message] = field(default_factory=list)
    templated: list[Message] = field(default_factory=list)
    replies: list[tuple[Message, str]] = field(default_factory=list)  # (reply as sent, text the policy sampled)
    tools: list[dict[str, Any]] | None = None

    def admit(self, messages: list[Message], tools: list[dict[str, Any]]) -> Admission:
        """Check a request against the history and take it in; a prefill request is a GatewayRequestError."""
        if messages[-1]["role"] == "assistant":
            raise GatewayRequestError(
                "the request ends with an assistant message (a prefill); the gateway samples whole replies, so end "
                "with a user, tool or system message"
            )
        if self.tools is None:  # the opening request
            admission = Admission([_template_form(m) for m in messages], opening=True)
            self.templated = list(admission.messages)
        else:
            problem = self._divergence(messages, tools)
            if problem is None:
                admission = Admission([_template_form(m) for m in messages[len(self.expected) :]])
                self.templated.extend(admission.messages)
            else:
                admission = Admission([self._rewritten(m) for m in messages], problem)
                self.templated = list(admission.messages)
        self.expected, self.tools = list(messages), list(tools)
        return admission

    def record_reply(self, reply: Message, sampled_text: str) -> None:
        """The gateway answered the last request with ``reply``, whose sampled text is ``sampled_text``."""
        held = canonical_message(reply, len(self.expected))
        self.expected.append(held)
        self.templated.append({"role": "assistant", "content": sampled_text})
        self.replies.append((held, sampled_text))

    def sampled_texts(self) -> list[str]:
        """The policy's text of every reply so far."""
        return [text for _, text in self.replies]

    def _divergence(self, messages: list[Message], tools: list[dict[str, Any]]) -> str | None:
        if tools != self.tools:
            return "the request offers other tools than the previous one (the tools are part of the rendered prompt)"
        if len(messages) <= len(self.expected):
            return (
                f"the request has {len(messages)} messages, no more than the {len(self.expected)} the episode already "
                "holds (the agent dropped or replaced earlier messages)"
            )
        for index, (sent, held) in enumerate(zip(messages, self.expected)):
            if not same_message(sent, held):
                return f"message {index} ({sent['role']}) differs from the one the episode holds"
        return None

    def _rewritten(self, message: Message) -> Message:
        if message["role"] == "assistant":
            for reply, sampled in self.replies:
                if same_message(message, reply):
                    return {"role": "assistant", "content": sampled}
        return _template_form(message)
