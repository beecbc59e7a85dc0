"""``agentrl/AgentGateway-v0``: an agent program written against the OpenAI client, as an agentrl environment.

The agent drives its own loop, so training runs its episodes on ``AgentEpisodeRunner`` (``episode_runner``):
each model call is one assistant turn, recorded by the token ledger. The env object hosts one conversation at
a time (like any env, one episode at a time) and owns the agent's lifetime: a new episode, ``close`` or the
episode's end stop it. It is also a plain Gymnasium env seen from the model's side, which is what
``check_env``, scripted tests and the restore of a partial episode after a job restart use: ``reset`` starts
the agent and returns its first request's messages; ``step(text)`` answers the pending request with ``text``
and returns the next request's new messages (after a rewrite: the whole new history, with
``info["gateway"]["history"] == "rewritten"``), or ``([], reward, True, ...)`` when the agent returns. That is
deterministic replay when the agent is deterministic given its task and the replies it gets.
"""

from __future__ import annotations

from typing import Any, ClassVar

from agentrl.chat.messages import Message
from agentrl.env import MultiTurnEnv, StepResult
from agentrl.errors import AgentGatewayError, ConfigError, RolloutError
from agentrl.gateway.config import AgentGatewayConfig, load_tasks
from agentrl.gateway.conversation import AgentCall, Conversation, first_call_missing, outcome_info, outcome_problem
from agentrl.gateway.runner import AgentEpisodeRunner
from agentrl.gateway.server import gateway_server
from agentrl.gateway.session import AgentOutcome


class AgentGatewayEnv(MultiTurnEnv):
    """An OpenAI-client agent program trained through the gateway (see the module docstring)."""

    config_model = AgentGatewayConfig
    episode_runner: ClassVar[type[AgentEpisodeRunner]] = AgentEpisodeRunner

    def __init__(self, **kwargs: Any) -> None:
        self.config = AgentGatewayConfig(**kwargs)
        self.max_turns = self.config.max_turns
        self.replayable = self.config.replayable
        self.tasks = load_tasks(self.config.tasks)
        self.program = self.config.agent.program()
        self.conversation: Conversation | None = None
        self._over = True  # no episode, or the agent returned

    def task_ids(self) -> list[str]:
        """The configured tasks' ids, in order."""
        return list(self.tasks)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """None up front: each request brings its own tools (rendered per episode)."""
        return []

    def preflight(self) -> list[str]:
        """The agent program is runnable and the gateway answers."""
        return [*self.program.preflight(), f"{len(self.tasks)} tasks; gateway at {gateway_server().url}"]

    def open_conversation(self, task_id: str | None) -> Conversation:
        """Start the agent on ``task_id`` (None: the first task), ending this env's previous conversation."""
        self.end_conversation("a new episode started on this env")
        if task_id is None:
            task_id = next(iter(self.tasks))
        if task_id not in self.tasks:
            raise ConfigError(f"unknown task_id {task_id!r}; this env's tasks are {', '.join(list(self.tasks)[:10])}")
        config = self.config
        self.conversation = Conversation(
            self.program,
            self.tasks[task_id],
            gateway_server(),
            model=config.model_name,
            turn_timeout_s=config.turn_timeout_s,
        )
        return self.conversation

    def end_conversation(self, message: str, wait: bool = False) -> None:
        """End the current conversation (refuse its open request with ``message``, stop the agent)."""
        if self.conversation is not None:
            self.conversation.end(message, wait=wait)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[Message], dict]:
        """Start the agent on the task and return its first request's messages."""
        super().reset(seed=seed)
        conversation = self.open_conversation((options or {}).get("task_id"))
        event = conversation.next_event_blocking()
        if isinstance(event, AgentOutcome):
            raise AgentGatewayError(first_call_missing(event))
        self._over = False
        return event.messages, event.record()

    def step(self, action: str) -> StepResult:
        """Answer the agent's request with ``action``; its next request's messages, or its reward."""
        conversation = self.conversation
        if conversation is None or self._over or conversation.pending is None:
            raise RolloutError("step() needs a request to answer: call reset() first (the agent's episode is over)")
        conversation.reply(action, None, None)
        event = conversation.next_event_blocking()
        if isinstance(event, AgentCall):
            return event.messages, 0.0, False, False, event.record()
        self._over = True
        problem = outcome_problem(event, conversation.transcript.sampled_texts())
        if problem is not None:
            raise AgentGatewayError(problem)
        return [], event.reward, True, False, outcome_info(event)

    def close(self) -> None:
        """Stop the agent (its process group is gone when this returns)."""
        self.end_conversation("the environment was closed", wait=True)
