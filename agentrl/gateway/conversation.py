"""One conversation: an agent program's run for one episode, its session on the gateway and its transcript.

The episode side (``AgentEpisodeRunner``, or the env's sync API) waits for events: an ``AgentCall`` (a
request, checked against the transcript: new messages, or a rewritten history with the reason) or the
``AgentOutcome`` (the agent ended). It answers each call with the sampled turn and ends the conversation
(unanswered call refused, agent stopped) when the episode ends. A request the transcript cannot take (a
prefill) is answered with a 400 at once and the wait goes on: the agent hears why.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any

from agentrl.chat.messages import Message
from agentrl.errors import AgentGatewayError, OpenAIRequestError, RolloutError
from agentrl.gateway.programs import KILL_GRACE_S, AgentProgram, Endpoint
from agentrl.gateway.protocol import CallPlan
from agentrl.gateway.replies import SampledTurn, completion
from agentrl.gateway.server import GatewayServer
from agentrl.gateway.session import AgentOutcome, CallAnswer, PendingCall
from agentrl.gateway.transcript import Transcript
from agentrl.openai_api.responses import error_body


@dataclass
class AgentCall:
    """A request taken in: its messages for the chat template (new ones, or the whole rewritten history)."""

    messages: list[Message]
    rewrite: str | None  # why the history could not be extended (None: it was)
    plan: CallPlan
    opening: bool = False

    def record(self) -> dict[str, Any]:
        """What the turn answering this request keeps of it in its info."""
        history = "opening" if self.opening else "rewritten" if self.rewrite else "extended"
        gateway: dict[str, Any] = {"history": history}
        if self.rewrite:
            gateway["rewrite_reason"] = self.rewrite
        if self.plan.notes:
            gateway["notes"] = list(self.plan.notes)
        record: dict[str, Any] = {"gateway": gateway}
        if self.plan.max_tokens is not None:
            record["max_new_tokens"] = self.plan.max_tokens
        return record


def outcome_info(outcome: AgentOutcome) -> dict[str, Any]:
    """The last turn's info for an outcome: the keys of ``agentrl.env.EnvInfo`` the agent gave."""
    record: dict[str, Any] = {"reward_components": dict(outcome.reward_components)}
    if outcome.success is not None:
        record["success"] = outcome.success
    return record


def outcome_problem(outcome: AgentOutcome, replies: list[str]) -> str | None:
    """Why ``outcome`` cannot be the reward: the agent failed, or its reward line is text the policy wrote."""
    if outcome.error is not None:
        return f"the agent program failed: {outcome.error}"
    line = outcome.reward_line
    if line and any(line in reply for reply in replies):
        return (
            f"the agent's reward line {line[:80]!r} appears in the policy's own reply: the agent echoes model output "
            "to stdout, so the policy could write its own reward; print model text to stderr only"
        )
    return None


def first_call_missing(outcome: AgentOutcome) -> str:
    """The error of an agent that ended before its first model call."""
    why = f"it failed: {outcome.error}" if outcome.error else f"it returned reward {outcome.reward}"
    return (
        f"the agent program ended before its first model call ({why}); it must call "
        "client.chat.completions.create at least once"
    )


class Conversation:
    """See the module docstring; ``endpoint`` is what the agent program is given."""

    def __init__(
        self, program: AgentProgram, task: dict[str, Any], server: GatewayServer, *, model: str, turn_timeout_s: float
    ) -> None:
        self.server = server
        self.session = server.open_session(model)
        self.endpoint = Endpoint(f"{server.url}/ep/{self.session.key}/v1", self.session.api_key)
        self.transcript = Transcript()
        self.pending: PendingCall | None = None  # the call taken and not yet answered
        self.turn_timeout_s = turn_timeout_s
        self.ended = False
        self._agent_done = threading.Event()
        if server.on_own_thread():
            raise AgentGatewayError("a conversation cannot be opened on the gateway's own thread; open it from another")
        self._agent: asyncio.Task[None] = server.run(self._launch(program, task)).result(timeout=30)

    @property
    def plan(self) -> CallPlan | None:
        """The plan of the request being answered (None between calls)."""
        return self.pending.plan if self.pending is not None else None

    async def _launch(self, program: AgentProgram, task: dict[str, Any]) -> asyncio.Task[None]:
        """Start the agent's task on the gateway's loop; its end is signalled even if it never ran."""
        agent = asyncio.get_running_loop().create_task(self._drive(program, task))
        agent.add_done_callback(lambda _: self._agent_done.set())
        return agent

    async def _drive(self, program: AgentProgram, task: dict[str, Any]) -> None:
        """Run the agent on the gateway's loop; its end (or failure) becomes the outcome."""
        try:
            outcome = await program.run(task, self.endpoint)
        except asyncio.CancelledError:
            self.session.finish(AgentOutcome(error="the agent was stopped: its episode ended"))
            raise
        except Exception as exc:  # the agent's own failure is the episode's data
            outcome = AgentOutcome(error=f"{type(exc).__name__}: {exc}")
        self.session.finish(outcome)

    def _take(self, event: PendingCall | AgentOutcome) -> AgentCall | AgentOutcome | None:
        if isinstance(event, AgentOutcome):
            return event
        try:
            admission = self.transcript.admit(event.plan.messages, event.plan.tools)
        except OpenAIRequestError as exc:
            self.session.answer(event, CallAnswer(400, error_body(str(exc), 400)))
            return None
        self.pending = event
        return AgentCall(admission.messages, admission.rewrite, event.plan, admission.opening)

    async def next_event(self, stop: asyncio.Event) -> AgentCall | AgentOutcome | None:
        """The next request or the outcome; None once ``stop`` is set (nothing is taken then)."""
        while True:
            raw = await self.session.wait(stop, self.turn_timeout_s)
            if raw is None:
                return None
            event = self._take(raw)
            if event is not None:
                return event

    def next_event_blocking(self) -> AgentCall | AgentOutcome:
        """``next_event`` for a plain thread (the env's sync API)."""
        if self.server.on_own_thread():
            raise AgentGatewayError(
                "the env's sync reset/step was called on the gateway's own thread (from a Python agent?); it "
                "would wait on itself: call it from another thread"
            )
        while True:
            event = self._take(self.session.wait_blocking(self.turn_timeout_s))
            if event is not None:
                return event

    def reply(self, text: str, sampled: SampledTurn | None, tokenizer: Any) -> None:
        """Answer the pending request with the turn ``text`` (tokens and logprobs from ``sampled`` when known)."""
        call = self.pending
        if call is None:
            raise RolloutError("the conversation has no request to answer; wait for the agent's next request first")
        body = completion(text, call.plan, len(self.transcript.replies), self.session.model, sampled, tokenizer)
        self.transcript.record_reply(body["choices"][0]["message"], text)
        self.pending = None
        self.session.answer(call, CallAnswer(200, body))

    def refuse(self, message: str) -> None:
        """Answer the pending request with a 400 carrying ``message``."""
        if self.pending is not None:
            self.session.answer(self.pending, CallAnswer(400, error_body(message, 400)))
            self.pending = None

    def end(self, message: str, wait: bool = False) -> None:
        """Refuse what is unanswered with ``message``, stop the agent; ``wait``: until its process is gone."""
        if not self.ended:
            self.ended = True
            self.server.close_session(self.session, message)
            self.server.loop.call_soon_threadsafe(self._agent.cancel)
        if wait and not self.server.on_own_thread():
            self._agent_done.wait(KILL_GRACE_S + 15.0)
