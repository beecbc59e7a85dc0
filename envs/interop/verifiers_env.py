"""Verifiers-v0: a verifiers (v1) taskset as a MultiTurnEnv, scored by its own rewards, metrics and judges.

verifiers v1 owns its rollout loop: an ``Env.run`` drives agent *programs* (harnesses such as
``bash`` or the tool-less ``null`` chat program) that call the model through verifiers'
interception server, an OpenAI-compatible endpoint; its toolsets are MCP servers that read
per-rollout state back from that server. None of that can be stepped turn by turn from outside.
What can: a ``Taskset`` (tasks with prompt and system prompt) and each ``Task``'s judgement
(``@vf.reward``, ``@vf.metric``, plugged judges via ``Task.score(trace)``). So this adapter plays the
``null`` harness itself: the task's prompt opens the chat, the model answers once, and the
verifiers trace of that chat is scored by the task. Toolsets, runtime-bound rewards, harness
programs and multi-agent ``Env``s are refused with a pointer to the agent gateway.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentrl.env import Message, MultiTurnEnv, StepResult, system, user
from agentrl.errors import ConfigError

INSTALL_HINT = "pip install 'agentrl[verifiers]'"


class VerifiersConfig(BaseModel):
    """Constructor kwargs of Verifiers-v0."""

    model_config = ConfigDict(extra="forbid")
    taskset: str = Field(
        description="'module:attr': a verifiers Taskset subclass, or a function returning a Taskset instance."
    )
    taskset_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Fields of the taskset's TasksetConfig (a class) or the function's kwargs."
    )
    limit: int | None = Field(None, ge=1, description="Use only the first N tasks (None: all).")
    success_reward: float = Field(1.0, description="info['success'] = every reward scored and the total >= this.")


def _import_verifiers() -> Any:
    try:
        return importlib.import_module("verifiers.v1")
    except ImportError as exc:
        raise ConfigError(f"Verifiers-v0 needs the verifiers package (v1 API): {INSTALL_HINT}") from exc


def load_taskset(ref: str, kwargs: dict[str, Any]) -> Any:
    """The Taskset named by ``module:attr`` (a Taskset class built from its config type, or a factory)."""
    vf = _import_verifiers()
    module_name, _, attr = ref.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load verifiers taskset {ref!r}: {exc}; give 'module:TasksetClass'") from exc
    if isinstance(target, type) and issubclass(target, vf.Taskset):
        from verifiers.v1.utils.generic import concrete_type

        config_cls = concrete_type(target, vf.TasksetConfig, origin=vf.Taskset) or vf.TasksetConfig
        return target(config_cls(**kwargs))
    taskset = target(**kwargs) if callable(target) else target
    if not isinstance(taskset, vf.Taskset):
        raise ConfigError(f"{ref!r} gave a {type(taskset).__name__}, not a verifiers.v1.Taskset")
    return taskset


def _check_supported(task: Any) -> None:
    """Refuse what only verifiers' own rollout loop can run (toolsets, runtime-bound scoring)."""
    import inspect

    gateway = "run it through agentrl's agent gateway (an OpenAI-compatible endpoint verifiers can call)"
    if type(task).toolsets(task.config):
        raise ConfigError(
            f"verifiers task {type(task).__name__} declares toolsets: they are MCP servers that read per-rollout state "
            f"from verifiers' interception server, which only verifiers' rollout loop provides; {gateway}"
        )
    for fn in [*task.hooks("reward"), *task.hooks("metric"), *(j.score for j in task.plugged_judges())]:
        runtime = inspect.signature(fn).parameters.get("runtime")
        if runtime is not None and runtime.default is inspect.Parameter.empty:
            raise ConfigError(
                f"verifiers task {type(task).__name__}: {fn.__name__} needs a runtime (a container the agent worked "
                f"in), which this adapter does not provide; {gateway}, or use Harbor-v0 for container tasks"
            )


class VerifiersEnv(MultiTurnEnv):
    """A verifiers v1 taskset played as the null harness: one chat reply per task, scored by the task itself."""

    config_model = VerifiersConfig
    max_turns = 1

    def __init__(self, **kwargs: Any) -> None:
        self.config = VerifiersConfig(**kwargs)
        taskset = load_taskset(self.config.taskset, self.config.taskset_kwargs)
        if self.config.limit is not None:
            taskset = taskset.take(self.config.limit)
        tasks = list(taskset)
        if not tasks:
            raise ConfigError(f"verifiers taskset {self.config.taskset!r} yields no tasks")
        self._tasks = {str(t.data.id if t.data.id is not None else t.data.idx): t for t in tasks}
        for task in tasks:
            _check_supported(task)
        self.task: Any = tasks[0]
        self._messages: list[Message] = []

    def task_ids(self) -> list[str]:
        """The tasks' ids (their data ``id``, else their position in the taskset)."""
        return list(self._tasks)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Open the chat of task ``options['task_id']`` (else one drawn with ``seed``): system prompt + prompt."""
        super().reset(seed=seed)
        task_id = self.choose_task_id(options, self._tasks, "the verifiers taskset")
        self.task = self._tasks[task_id]
        data = self.task.data
        prompt = data.prompt if data.prompt is not None else ""
        opening = [system(data.system_prompt)] if data.system_prompt else []
        if isinstance(prompt, str):
            opening.append(user(prompt))
        else:
            opening.extend({"role": m.role, "content": m.content} for m in prompt)
        self._messages = opening
        return list(opening), {"task_id": task_id, "task_key": self.task.key}

    def _trace(self, reply: str) -> Any:
        vf = importlib.import_module("verifiers.v1")
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.state import state_cls
        from verifiers.v1.trace import AgentInfo, TraceTask

        task = self.task
        trace = vf.Trace(
            task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            agent=AgentInfo(config=vf.AgentConfig()),
            state=state_cls(type(task))(),
        )
        kinds = {"system": vf.SystemMessage, "user": vf.UserMessage, "assistant": vf.AssistantMessage}
        chat = [*self._messages, {"role": "assistant", "content": reply}]
        for index, message in enumerate(chat):
            node_message = kinds[message["role"]](content=message["content"])
            sampled = index == len(chat) - 1
            trace.nodes.append(MessageNode(parent=index - 1 if index else None, message=node_message, sampled=sampled))
        trace.stop("agent_completed")
        return trace

    def step(self, action: str) -> StepResult:
        """Score the reply with the task's rewards (weighted sum), metrics and judges; the episode ends."""
        trace = self._trace(action)
        asyncio.run(self.task.score(trace))
        components = {name: r.score for name, r in trace.rewards.items() if r is not None}
        missing = [name for name, r in trace.rewards.items() if r is None]
        info: dict[str, Any] = {
            "reward_components": components,
            "metrics": {k: v for k, v in trace.metrics.items() if v is not None},
            "success": not missing and trace.reward >= self.config.success_reward,
        }
        if missing:
            info["unscored"] = missing
        return [], float(trace.reward), True, False, info
