"""Verifiers-v0: a verifiers (v1) taskset as a MultiTurnEnv, scored by its own rewards, metrics and judges.

verifiers v1 owns its rollout loop: an ``Env.run`` drives agent *programs* (harnesses such as
``bash`` or the tool-less ``null`` chat program) that call the model through verifiers'
interception server, an OpenAI-compatible endpoint; its toolsets are MCP servers that read
per-rollout state back from that server. None of that can be stepped turn by turn from outside.
What can: a ``Taskset`` (tasks with prompt and system prompt) and each ``Task``'s judgement
(``@vf.reward``, ``@vf.metric``, plugged judges via ``Task.score(trace)``). So this adapter plays the
``null`` harness itself: the task's prompt opens the chat, the model answers once, and the
verifiers trace of that chat is scored by the task. Refused at construction, each with its reason:
toolsets, runtime-bound rewards, a package's own ``Env`` (a multi-turn or multi-agent rollout, such
as a scripted user), non-text prompt parts (images), and an endless taskset without ``limit``.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentrl.env import Message, MultiTurnEnv, StepResult, system, user
from agentrl.errors import ConfigError

INSTALL_HINT = "pip install 'agentrl[verifiers]'"
MAX_TASKS = 100_000  # without `limit`, a taskset is read whole into memory: more is taken as endless
GATEWAY = "run it through agentrl's agent gateway (an OpenAI-compatible endpoint verifiers can call)"


class VerifiersConfig(BaseModel):
    """Constructor kwargs of Verifiers-v0."""

    model_config = ConfigDict(extra="forbid")
    taskset: str = Field(
        description="A verifiers environment package's id as `vf eval` takes it (e.g. 'reverse-text': the installed "
        "package exporting its Taskset via __all__), or 'module:attr': a Taskset subclass or a function returning one."
    )
    taskset_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Fields of the taskset's TasksetConfig (a class) or the function's kwargs."
    )
    limit: int | None = Field(
        None,
        ge=1,
        description=f"Use only the first N tasks (None: all; an endless or >{MAX_TASKS}-task set is refused).",
    )
    success_reward: float = Field(1.0, description="info['success'] = every reward scored and the total >= this.")


def _import_verifiers() -> Any:
    try:
        return importlib.import_module("verifiers.v1")
    except ImportError as exc:
        raise ConfigError(f"Verifiers-v0 needs the verifiers package (v1 API): {INSTALL_HINT}") from exc


def _module_env(module: ModuleType) -> type | None:
    """The ``vf.Env`` subclass a package exports via ``__all__`` (verifiers' own rule), if any."""
    vf = importlib.import_module("verifiers.v1")
    exported = [getattr(module, name, None) for name in getattr(module, "__all__", [])]
    envs = [obj for obj in exported if isinstance(obj, type) and issubclass(obj, vf.Env) and obj is not vf.Env]
    return envs[0] if envs else None


def _import_target(ref: str) -> tuple[ModuleType, Any]:
    """(module, Taskset class or factory) for ``module:attr`` or a package id (``vf eval``'s resolution)."""
    vf = _import_verifiers()
    module_name, _, attr = ref.partition(":")
    try:
        if attr:
            module = importlib.import_module(module_name)
            return module, getattr(module, attr)
        from verifiers.v1.utils.loaders import import_taskset

        module = import_taskset(ref)
        return module, next(
            obj
            for name in getattr(module, "__all__", [])
            if isinstance(obj := getattr(module, name, None), type) and issubclass(obj, vf.Taskset)
        )
    except (ImportError, AttributeError, StopIteration) as exc:
        raise ConfigError(
            f"cannot load verifiers taskset {ref!r}: {exc or 'its package exports no Taskset via __all__'}; give "
            "an installed environment package's id (e.g. 'reverse-text') or 'module:TasksetClass'"
        ) from exc


def load_taskset(ref: str, kwargs: dict[str, Any]) -> Any:
    """The Taskset named by ``ref`` (a Taskset class built from its config type, or a factory's result).

    Refuses a package whose own ``Env`` drives the rollout (its user's turns are that env's, not a chat).
    """
    vf = _import_verifiers()
    module, target = _import_target(ref)
    env_class = _module_env(module)
    if env_class is not None and not issubclass(env_class, vf.SingleAgentEnv):
        raise ConfigError(
            f"verifiers environment {ref!r} exports its own Env, {env_class.__name__}: a multi-turn or multi-agent "
            "rollout (a scripted or simulated user, judges, several agents) whose other turns only its own loop "
            f"produces; Verifiers-v0 plays single-reply tasks, so {GATEWAY}"
        )
    if isinstance(target, type) and issubclass(target, vf.Taskset):
        from verifiers.v1.utils.generic import concrete_type

        config_cls = concrete_type(target, vf.TasksetConfig, origin=vf.Taskset) or vf.TasksetConfig
        return target(config_cls(**kwargs))
    taskset = target(**kwargs) if callable(target) else target
    if not isinstance(taskset, vf.Taskset):
        raise ConfigError(f"{ref!r} gave a {type(taskset).__name__}, not a verifiers.v1.Taskset")
    return taskset


def read_tasks(taskset: Any, ref: str, limit: int | None) -> list[Any]:
    """The first ``limit`` tasks; without a limit an endless taskset is refused instead of read forever."""
    if limit is not None:
        return list(taskset.take(limit))
    if not taskset.bounded:
        raise ConfigError(
            f"verifiers taskset {ref!r} is endless (Taskset.INFINITE: its load() generates tasks without end); "
            "set env.kwargs.limit to the number of tasks to use"
        )
    tasks = list(itertools.islice(taskset, MAX_TASKS + 1))
    if len(tasks) > MAX_TASKS:
        raise ConfigError(
            f"verifiers taskset {ref!r} yields more than {MAX_TASKS} tasks (endless?): set env.kwargs.limit"
        )
    return tasks


def _prompt_messages(task: Any) -> list[Message]:
    """The task's opening chat (system prompt + prompt) as text messages; ConfigError for non-text parts."""
    data = task.data
    opening = [system(data.system_prompt)] if data.system_prompt else []
    prompt = data.prompt if data.prompt is not None else ""
    if isinstance(prompt, str):
        return [*opening, user(prompt)]
    for message in prompt:
        content = message.content
        if not isinstance(content, str):
            kinds = sorted({getattr(part, "type", type(part).__name__) for part in content or []} - {"text"})
            if kinds:
                raise ConfigError(
                    f"verifiers task {data.id or data.idx!r} has a prompt with {', '.join(kinds)} content: agentrl "
                    "trains text-only policies (the chat template renders text); drop those tasks (taskset_kwargs "
                    "or a filter) or use a text-only variant"
                )
            content = "".join(part.text for part in content or [])
        opening.append({"role": message.role, "content": content})
    return opening


def _check_supported(task: Any) -> None:
    """Refuse what only verifiers' own rollout loop can run (toolsets, runtime-bound scoring)."""
    import inspect

    gateway = GATEWAY
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
        tasks = read_tasks(taskset, self.config.taskset, self.config.limit)
        if not tasks:
            raise ConfigError(f"verifiers taskset {self.config.taskset!r} yields no tasks")
        self._tasks = {str(t.data.id if t.data.id is not None else t.data.idx): t for t in tasks}
        for task in tasks:
            _check_supported(task)
            _prompt_messages(task)
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
        opening = _prompt_messages(self.task)
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
