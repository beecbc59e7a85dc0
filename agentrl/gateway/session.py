"""One conversation's mailbox: the agent's requests in, the episode's answers out, across two threads.

HTTP handlers (on the gateway's event-loop thread) post calls and await their answers; the episode
side (the rollout's event loop, or a plain thread for the env's sync API) takes calls and the agent's
outcome, and answers. Invariant: an agent has at most one call in flight; a call is taken once, answered
once, and a client's retry of the same request joins the call instead of sampling a second reply.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentrl.errors import AgentGatewayError
from agentrl.gateway.protocol import CallPlan
from agentrl.openai_api.responses import error_body


class AgentOutcome(BaseModel):
    """How the agent program ended: its reward (plain, finite numbers), or the error that ended it."""

    model_config = ConfigDict(extra="forbid")

    reward: float = Field(0.0, allow_inf_nan=False, description="The episode's outcome reward.")
    reward_components: dict[str, float] = Field(default_factory=dict, description="Named parts, for logging.")
    success: bool | None = Field(None, description="Whether the task was solved (None: reward >= 1).")
    error: str | None = Field(None, description="Why the agent failed (then there is no reward).")
    reward_line: str | None = Field(None, description="The stdout line a command agent's reward came from.")


@dataclass
class CallAnswer:
    """What an HTTP handler sends back: a JSON body and its status."""

    status: int
    body: dict[str, Any]


@dataclass
class PendingCall:
    """One request of the agent, waiting for the episode's answer."""

    plan: CallPlan
    future: asyncio.Future[CallAnswer]  # of the gateway's loop
    answered: bool = False
    requests: int = 1  # HTTP requests waiting on it: a client's retry joins the call it repeats


@dataclass
class AgentSession:
    """The mailbox of one conversation (see the module docstring); ``key`` is its URL path segment."""

    key: str
    api_key: str
    loop: asyncio.AbstractEventLoop  # the gateway's loop, where call futures live
    model: str = "agentrl-policy"  # the model id /models reports
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _calls: deque[PendingCall] = field(default_factory=deque)
    _live: PendingCall | None = None  # the last call, until answered
    _outcome: AgentOutcome | None = None
    _wakers: list[Callable[[], None]] = field(default_factory=list)
    closed: bool = False

    async def submit(self, plan: CallPlan) -> CallAnswer:
        """Post a request (an HTTP handler, on the gateway loop) and wait for the episode's answer."""
        with self._cond:
            live = self._live
            if self.closed:
                return CallAnswer(404, error_body("this episode is over; its agent program should have stopped", 404))
            if live is not None and not live.plan.same_request(plan):
                return CallAnswer(409, error_body(_CONCURRENT, 409))
            if live is None:
                live = self._live = PendingCall(plan, self.loop.create_future())
                self._calls.append(live)
                self._notify()
            else:
                live.requests += 1
        return await asyncio.shield(live.future)

    def finish(self, outcome: AgentOutcome) -> None:
        """The agent program ended (any thread)."""
        with self._cond:
            self._outcome = outcome
            self._notify()

    def answer(self, call: PendingCall, answer: CallAnswer) -> None:
        """Answer a taken call (any thread); its HTTP handler (and any retry that joined it) replies."""
        with self._cond:
            if call.answered:
                return
            call.answered = True
            if self._live is call:
                self._live = None
        self.loop.call_soon_threadsafe(_resolve, call.future, answer)

    def close(self, message: str) -> None:
        """No more calls: every unanswered one gets a 400 with ``message`` (the agent's client raises it)."""
        with self._cond:
            self.closed = True
            calls = list(self._calls) + ([self._live] if self._live is not None else [])
            self._calls.clear()
            self._notify()
        for call in calls:
            self.answer(call, CallAnswer(400, error_body(message, 400)))

    def poll(self) -> PendingCall | AgentOutcome | None:
        """Take the next call, else the outcome once the agent ended, else None (never blocks)."""
        with self._cond:
            return self._poll_locked()

    def _poll_locked(self) -> PendingCall | AgentOutcome | None:
        if self._calls:
            return self._calls.popleft()
        return self._outcome

    def _notify(self) -> None:
        self._cond.notify_all()
        wakers, self._wakers = self._wakers, []
        for wake in wakers:
            wake()

    async def wait(self, stop: asyncio.Event, timeout_s: float) -> PendingCall | AgentOutcome | None:
        """The next call or the outcome (None once ``stop`` is set); AgentGatewayError after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + timeout_s
        while True:
            woken: asyncio.Future[None] = loop.create_future()
            with self._cond:
                event = self._poll_locked()
                if event is None:
                    self._wakers.append(_waker(loop, woken))
            if event is not None:
                return event
            if stop.is_set():
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise _timeout(timeout_s)
            stopping = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait({woken, stopping}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopping.cancel()

    def wait_blocking(self, timeout_s: float) -> PendingCall | AgentOutcome:
        """The next call or the outcome, blocking this (non-gateway) thread; AgentGatewayError on timeout."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._calls or self._outcome is not None, timeout=timeout_s):
                raise _timeout(timeout_s)
            event = self._poll_locked()
        assert event is not None
        return event


_CONCURRENT = (
    "this episode already has a request in flight with other messages; an agent episode is one conversation, so "
    "wait for each reply before the next request (parallel calls need separate episodes)"
)


def _waker(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> Callable[[], None]:
    def wake() -> None:
        try:
            loop.call_soon_threadsafe(_resolve, future, None)
        except RuntimeError:  # that loop is closed: nobody waits any more
            pass

    return wake


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _timeout(timeout_s: float) -> AgentGatewayError:
    return AgentGatewayError(
        f"the agent sent no request and did not return within {timeout_s:g} s of its last reply; make it faster, or "
        "raise env.kwargs.turn_timeout_s"
    )
