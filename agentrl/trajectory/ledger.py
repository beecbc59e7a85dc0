"""The token ledger: grows an Episode's token segment append-only, turn by turn.

Invariant: the decoded tokens of the current segment equal the chat template's rendering of the
history (assistant turns as sampled); sampled ids and logprobs are stored verbatim, env messages
and template glue are appended as tokens of the rendered text delta, and nothing is re-tokenized.
"""

from __future__ import annotations

from agentrl.chat import ChatAssembler
from agentrl.chat.messages import Message
from agentrl.errors import RolloutError, TemplateError
from agentrl.trajectory import Episode, TokenSegment


def _difference(expected: str, actual: str) -> str:
    """A short description of where two texts first differ."""
    index = next((i for i, (a, b) in enumerate(zip(expected, actual)) if a != b), min(len(expected), len(actual)))
    start = max(0, index - 30)
    return f"at char {index}: expected {expected[start : index + 40]!r}, template gives {actual[start : index + 40]!r}"


def _check_not_ending_with_assistant(messages: list[Message], method: str) -> None:
    """The ledger appends the generation prompt after these, so an assistant message cannot come last."""
    if messages and messages[-1].get("role") == "assistant":
        raise RolloutError(
            f"{method}() got messages ending with an assistant message; the ledger adds the generation prompt "
            "itself, so end with a system/user/tool message (sampled turns go through append_sampled/end_turn)"
        )


class TokenLedger:
    """Append-only token record of one episode, rendered with a ``ChatAssembler``.

    Call order per episode: ``start(opening)``, then per assistant turn ``append_sampled`` (once or
    more, e.g. across a partial-rollout resume), ``end_turn(text)``, and ``append_env(messages)``
    unless the episode ended. A ledger can wrap an episode restored from the rollout buffer: its
    state is derived from ``episode.messages`` and ``episode.segments`` alone.
    """

    def __init__(self, episode: Episode, assembler: ChatAssembler) -> None:
        self.episode = episode
        self.assembler = assembler
        self._gen_text_cache: tuple[int, str] | None = None

    @property
    def segment(self) -> TokenSegment:
        """The segment new tokens go to."""
        return self.episode.segment

    @property
    def turn_ended(self) -> bool:
        """True after ``end_turn`` until the next ``append_env``."""
        return bool(self.episode.messages) and self.episode.messages[-1].get("role") == "assistant"

    def start(self, messages: list[Message]) -> None:
        """Render the opening messages plus the generation prompt into the segment's prompt ids."""
        if self.segment.prompt_ids or self.segment.completion_ids or len(self.episode.segments) > 1:
            raise RolloutError(
                f"episode {self.episode.episode_id!r} already has tokens; start() is called once per episode"
            )
        opening = [dict(m) for m in messages]
        _check_not_ending_with_assistant(opening, "start")
        text = self.assembler.render(opening, add_generation_prompt=True)
        self.segment.prompt_ids = self.assembler.encode(text)
        self.episode.messages = opening
        self._gen_text_cache = (len(opening), text)

    def append_sampled(self, ids: list[int], logprobs: list[float], versions: list[int], turn_index: int) -> None:
        """Append engine-sampled tokens verbatim (loss mask 1) to the open assistant turn."""
        if not self.segment.prompt_ids:
            raise RolloutError("append_sampled() before start(): render the opening messages first")
        if self.turn_ended:
            raise RolloutError(
                f"turn {turn_index}: the previous turn was ended; call append_env(messages) before sampling again"
            )
        if not len(ids) == len(logprobs) == len(versions):
            raise RolloutError(
                f"turn {turn_index}: got {len(ids)} ids, {len(logprobs)} logprobs and {len(versions)} versions; "
                "pass one logprob and one version per sampled id (GenerateResult.token_versions())"
            )
        open_turn = self._open_turn_index()
        if turn_index < 0 or (open_turn is not None and open_turn != turn_index):
            raise RolloutError(
                f"turn_index={turn_index} but the open turn is {open_turn}; use the open turn's index or end it first"
            )
        seg = self.segment
        seg.completion_ids.extend(int(i) for i in ids)
        seg.logprobs.extend(float(lp) for lp in logprobs)
        seg.versions.extend(int(v) for v in versions)
        seg.loss_mask.extend([1] * len(ids))
        seg.turn_ids.extend([turn_index] * len(ids))

    def end_turn(self, action_text: str) -> None:
        """Close the open assistant turn; ``action_text`` (``decode_turn`` of its ids) joins the chat history."""
        if self.turn_ended:
            raise RolloutError("end_turn() called twice for one turn; call append_env(messages) in between")
        sampled_text = self.decode_turn(self.current_turn_ids())
        if action_text != sampled_text:
            raise RolloutError(
                f"end_turn({action_text[:60]!r}) differs from the sampled text {sampled_text[:60]!r}; "
                "pass ledger.decode_turn(output_ids) so the chat history matches the sampled tokens"
            )
        self.episode.messages.append({"role": "assistant", "content": action_text})

    def append_env(self, messages: list[Message]) -> None:
        """Append the env's new messages and the next generation prompt as template tokens (mask 0).

        On a template that cannot extend the history as an exact prefix this raises TemplateError
        (``template_mismatch="error"``) or starts a new segment holding the full re-render.
        """
        if not self.turn_ended:
            raise RolloutError("append_env() needs a finished assistant turn: call end_turn(decode_turn(ids)) first")
        history = self.episode.messages
        new_messages = [dict(m) for m in messages]
        _check_not_ending_with_assistant(new_messages, "append_env")
        gen_text = self._generation_text(history[:-1])
        old_text = self.assembler.render(history, add_generation_prompt=False)
        new_text = self.assembler.render(history + new_messages, add_generation_prompt=True)
        glue, problem = self._turn_glue(gen_text, old_text)
        if problem is None and not new_text.startswith(old_text):
            problem = (
                "the template re-renders earlier turns once new messages follow (e.g. Qwen3 strips <think> "
                f"from earlier assistant turns), {_difference(old_text, new_text)}"
            )
        if problem is not None:
            self._on_mismatch(problem, new_text)
        else:
            self._append_template(glue + new_text[len(old_text) :])
        history.extend(new_messages)
        self._gen_text_cache = (len(history), new_text)

    def start_segment(self, messages: list[Message]) -> None:
        """Continue after a finished turn from a history that replaces the recorded one (a new segment).

        For a driver that rewrites the chat (an agent program behind the gateway dropped or edited earlier
        messages): the segment so far stays as sampled; the new one's prompt is the render of ``messages``
        plus the generation prompt, and ``episode.messages`` becomes ``messages``.
        """
        if not self.turn_ended:
            raise RolloutError("start_segment() needs a finished assistant turn: call end_turn(decode_turn(ids)) first")
        history = [dict(m) for m in messages]
        _check_not_ending_with_assistant(history, "start_segment")
        text = self.assembler.render(history, add_generation_prompt=True)
        self.episode.segments.append(TokenSegment(prompt_ids=self.assembler.encode(text)))
        self.episode.messages = history
        self._gen_text_cache = (len(history), text)

    def input_ids(self) -> list[int]:
        """Prompt plus completion of the current segment: what the engine continues from."""
        return self.segment.input_ids

    def decode_turn(self, ids: list[int]) -> str:
        """Text of sampled ids for ``env.step``: a trailing stop token is dropped, everything else kept."""
        if ids and ids[-1] in self.assembler.stop_token_ids:
            ids = ids[:-1]
        return self.assembler.decode(list(ids))

    def current_turn_ids(self) -> list[int]:
        """Sampled ids of the open (or just ended) assistant turn in the current segment."""
        seg = self.segment
        turn = self._open_turn_index()
        if turn is None:
            return []
        start = len(seg.turn_ids)
        while start > 0 and seg.turn_ids[start - 1] == turn and seg.loss_mask[start - 1] == 1:
            start -= 1
        return seg.completion_ids[start:]

    def _open_turn_index(self) -> int | None:
        """Turn index of trailing sampled tokens, or None when the segment ends with template tokens."""
        seg = self.segment
        if seg.loss_mask and seg.loss_mask[-1] == 1:
            return seg.turn_ids[-1]
        return None

    def _generation_text(self, history: list[Message]) -> str:
        """Rendered history with the generation prompt (cached from the previous append)."""
        if self._gen_text_cache is not None and self._gen_text_cache[0] == len(history):
            return self._gen_text_cache[1]
        return self.assembler.render(history, add_generation_prompt=True)

    def _turn_glue(self, gen_text: str, old_text: str) -> tuple[str, str | None]:
        """Template text between the sampled tokens and the next message, or a mismatch description."""
        if not old_text.startswith(gen_text):
            return (
                "",
                "the rendered assistant turn does not start with the generation prompt, "
                f"{_difference(gen_text, old_text)}",
            )
        turn = self.current_turn_ids()
        content = self.decode_turn(turn)
        rendered_turn = old_text[len(gen_text) :]
        if not rendered_turn.startswith(content):
            return "", (
                "the template renders the assistant turn differently from what was sampled (e.g. it strips "
                f"or reformats <think>), {_difference(content, rendered_turn)}"
            )
        rest = rendered_turn[len(content) :]
        if turn and turn[-1] in self.assembler.stop_token_ids:
            stop_text = self.assembler.decode([turn[-1]])
            if rest.startswith(stop_text):
                return rest[len(stop_text) :], None
        # Ended by length, a stop string or another EOS: close the turn the template's way.
        return rest, None

    def _append_template(self, text: str) -> None:
        """Append template/env tokens of ``text``: loss mask 0, logprob 0, turn -1, version -1."""
        ids = self.assembler.encode(text) if text else []
        seg = self.segment
        seg.completion_ids.extend(ids)
        seg.logprobs.extend([0.0] * len(ids))
        seg.loss_mask.extend([0] * len(ids))
        seg.turn_ids.extend([-1] * len(ids))
        seg.versions.extend([-1] * len(ids))

    def _on_mismatch(self, problem: str, new_text: str) -> None:
        """Fail loudly or start a new segment whose prompt is the full re-render; never patch tokens."""
        if self.assembler.template_mismatch == "error":
            raise TemplateError(
                f"episode {self.episode.episode_id!r}: the chat template cannot extend the token history as an exact "
                f"prefix: {problem}. Set rollout.template_mismatch='new_segment' to start a new token segment, or use "
                "a chat template that renders earlier turns unchanged"
            )
        self.episode.segments.append(TokenSegment(prompt_ids=self.assembler.encode(new_text)))

    def stats(self) -> dict[str, int]:
        """Counts for logging: segments, sampled and total tokens of the episode."""
        segments = self.episode.segments
        return {
            "segments": len(segments),
            "sampled_tokens": sum(s.num_sampled for s in segments),
            "tokens": sum(len(s.input_ids) for s in segments),
        }
