"""AgentEpisodeRunner: an episode whose turns an outside agent program drives through the gateway.

``EpisodeRunner``'s loop with the env's part played by the agent: the episode starts when the agent's first
request arrives (its messages, rendered with its tools, are the prompt); each request is one assistant turn
sampled from the engine under the episode's request id, so step-boundary aborts and weight updates apply as
for any episode; the turn goes back over HTTP; the agent's next request brings the env tokens (its new
messages, mask 0) or a rewritten history (a new token segment, the reason on the turn's info). The agent's
return value is the last turn's reward, as an env's final ``step`` returns it; with the earlier turns at 0,
the episode's R (the sum of its turn rewards) is the agent's reward and ``Episode.outcome`` stays None,
exactly what the env path records for the same exchange. A stop at a step boundary leaves
the agent's request open: the episode is partial, and the same request is answered when it resumes in this
job. Across a job restart the agent program is gone: the orchestrator restores the episode by replaying the
agent through ``AgentGatewayEnv``'s env API (verified), or restarts it, recorded.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from agentrl.chat import ChatAssembler
from agentrl.engines.base import SamplingParams
from agentrl.errors import AgentGatewayError
from agentrl.gateway.conversation import AgentCall, Conversation, first_call_missing, outcome_info, outcome_problem
from agentrl.gateway.protocol import CallPlan
from agentrl.gateway.replies import SampledTurn
from agentrl.gateway.session import AgentOutcome
from agentrl.rollout.replay import as_recorded
from agentrl.rollout.runner import EpisodeRunner, RunContext
from agentrl.trajectory import Episode, TurnRecord


class AgentEpisodeRunner(EpisodeRunner):
    """Runs one gateway episode (see the module docstring); ``env`` is its ``AgentGatewayEnv``."""

    def __init__(self, episode: Episode, env: Any, ctx: RunContext) -> None:
        self._stop = asyncio.Event()
        super().__init__(episode, env, ctx)
        self._assemblers: dict[str, ChatAssembler] = {}
        self.conversation: Conversation | None = None
        self.plan: CallPlan | None = None  # the request the open turn answers
        self._request_record: dict[str, Any] = {}
        live = getattr(env, "conversation", None)
        if live is not None and not live.ended and episode.segment.prompt_ids and not self.finished:
            # Restored by replay in a new job: the replayed agent waits for this turn's answer.
            self.conversation, self.plan = live, live.plan
            self.ledger.assembler = self._assembler(live.transcript.tools or [])
            self.turn_cap = live.plan.max_tokens if live.plan is not None else None

    @property  # type: ignore[override]
    def stop_requested(self) -> bool:
        """Set by the orchestrator at a step boundary; also wakes a wait for the agent."""
        return self._stop.is_set()

    @stop_requested.setter
    def stop_requested(self, value: bool) -> None:
        if value:
            self._stop.set()
        else:
            self._stop.clear()

    def _assembler(self, tools: list[dict[str, Any]]) -> ChatAssembler:
        """The run's chat assembler with this request's tools (rendered in the prompt like an env's tools)."""
        key = json.dumps(tools, sort_keys=True)
        if key not in self._assemblers:
            base = self.ctx.assembler
            self._assemblers[key] = ChatAssembler(
                base.tokenizer,
                tools=tools or None,
                template_mismatch=base.template_mismatch,
                template_kwargs=base.template_kwargs,
            )
        return self._assemblers[key]

    async def _start(self) -> None:
        """Start the agent (once) and wait for its first request: its messages are the prompt."""
        self.failure_source, self.env_method = "env", "agent"
        if self.conversation is None:
            self.conversation = self.env.open_conversation(self.episode.reset_options.get("task_id"))
        event = await self._next_event()
        if event is None:
            return  # stopped before the agent's first request: waited for again next step
        if isinstance(event, AgentOutcome):
            raise AgentGatewayError(first_call_missing(event))
        self._take(event)
        self.failure_source = "ledger"
        self.ledger.assembler = self._assembler(event.plan.tools)
        self.ledger.start(event.messages)
        self.episode.status = "running"

    async def _turn(self) -> None:
        """Answer and await the agent when the last turn is sampled but not yet followed up, else sample."""
        turns = self.episode.turns
        if self.ledger.turn_ended and turns and turns[-1].reward is None:
            await self._await_agent(turns[-1])
            return
        await super()._turn()

    def _sampling(self, max_new: int) -> SamplingParams:
        """The run's sampling settings plus the request's stop strings."""
        sampling = super()._sampling(max_new)
        extra = tuple(s for s in (self.plan.stop if self.plan is not None else ()) if s not in sampling.stop)
        return sampling.model_copy(update={"stop": sampling.stop + extra}) if extra else sampling

    async def _step(self, turn: TurnRecord) -> None:
        """The turn is sampled: close it in the ledger, answer the agent, await what it does next."""
        text = self.ledger.decode_turn(self.ledger.current_turn_ids())
        self.ledger.end_turn(text)
        turn.action = text
        await self._await_agent(turn)

    async def _await_agent(self, turn: TurnRecord) -> None:
        conversation = self.conversation
        assert conversation is not None
        self.failure_source, self.env_method = "env", "agent"
        if conversation.pending is not None:
            conversation.reply(turn.action, self._sampled(turn), self.ctx.assembler.tokenizer)
        event = await self._next_event()
        if event is None:
            return  # stopped: the agent's next request waits in its session for the resume
        if isinstance(event, AgentOutcome):
            self._conclude(turn, event)
            return
        turn.reward = 0.0
        turn.env_messages = as_recorded(event.messages)
        if len(self.episode.turns) >= self.max_turns:
            conversation.refuse(f"the episode's turn limit is reached ({self.max_turns} model calls)")
            self._finish("truncated")
            return
        self._take(event)
        self.failure_source = "ledger"
        if event.rewrite is None:
            self.ledger.append_env(event.messages)
        else:
            self.ledger.assembler = self._assembler(event.plan.tools)
            self.ledger.start_segment(event.messages)

    def _conclude(self, turn: TurnRecord, outcome: AgentOutcome) -> None:
        """The agent returned: its reward is the last turn's (reward-integrity checks first)."""
        problem = outcome_problem(outcome, [t.action for t in self.episode.turns])
        if problem is not None:
            raise AgentGatewayError(problem)
        turn.reward = outcome.reward
        turn.info.update(as_recorded(outcome_info(outcome)))
        self.episode.reward_components = dict(outcome.reward_components)
        self._finish("complete")

    def _take(self, event: AgentCall) -> None:
        """The request the next turn answers: its cap, stop strings and record."""
        self.plan, self.turn_cap = event.plan, event.plan.max_tokens
        self._request_record = as_recorded(event.record())

    def _turn_record(self) -> TurnRecord:
        """The open turn; a new one records the request it answers in its info."""
        turns = self.episode.turns
        if not turns or turns[-1].reward is not None:
            turns.append(TurnRecord(index=len(turns), max_new_tokens=self.turn_cap, info=dict(self._request_record)))
        return turns[-1]

    def _sampled(self, turn: TurnRecord) -> SampledTurn:
        """The finished turn's tokens as recorded (the trailing sampled tokens of the segment)."""
        ids = self.ledger.current_turn_ids()
        seg, n = self.ledger.segment, len(ids)
        start = len(seg.completion_ids) - n
        finish = turn.finish_reason if turn.finish_reason in ("stop", "length") else "stop"
        return SampledTurn(ids, seg.logprobs[start:], seg.versions[start:], len(seg.prompt_ids) + start, finish)

    async def _next_event(self) -> AgentCall | AgentOutcome | None:
        assert self.conversation is not None
        started = time.perf_counter()
        try:
            return await self.conversation.next_event(self._stop)
        finally:
            self.ctx.metrics.env_time_s += time.perf_counter() - started

    def _finish(self, status: str, outcome: Any = None) -> None:
        super()._finish(status, outcome)
        self._end(f"the episode ended ({status})")

    def _fail(self, exc: Exception) -> None:
        super()._fail(exc)
        self._end(f"the episode failed: {self.episode.error}")

    def _end(self, message: str) -> None:
        if self.conversation is not None:
            self.conversation.end(message)
