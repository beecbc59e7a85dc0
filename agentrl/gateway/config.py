"""Config of ``agentrl/AgentGateway-v0``: which agent program plays each episode, on which tasks, within which limits.

One model per agent kind, chosen by ``kind`` (a discriminated union, as sandbox backends are): ``python``
imports an ``async def agent(client, task)`` by name, ``command`` runs a program with ``OPENAI_BASE_URL``.
Shorthands keep the config one line: ``agent: "my_agent:agent"`` is a python agent, ``agent: [python,
agent.py]`` a command. Each kind builds its own program (``program()``), which owns its checks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator

from agentrl.config.base import StrictModel
from agentrl.errors import ConfigError
from agentrl.util.jsonl import jsonl_lines

if TYPE_CHECKING:
    from agentrl.gateway.programs import AgentProgram


class PythonAgentConfig(StrictModel):
    """An agent function in this process: ``async def agent(client, task) -> reward`` (a plain def runs in a thread)."""

    kind: Literal["python"] = "python"
    entry: str = Field(
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
        description="'module:function' of the agent; the module is imported from the working directory or "
        "PYTHONPATH. It is called with an openai.AsyncOpenAI client (openai.OpenAI for a plain def) and the task "
        "dict, and returns the reward (a number, or a dict with reward, reward_components, success).",
    )
    request_timeout_s: float = Field(
        3600.0,
        gt=0,
        description="Timeout of the client's requests: a request is held open while its episode waits at a step "
        "boundary (the trainer's update), so keep it above one training step.",
    )

    def program(self) -> AgentProgram:
        """The runnable agent (the function is imported now: a bad name fails before any episode)."""
        from agentrl.gateway.programs import PythonAgent

        return PythonAgent(self.entry, self.request_timeout_s)


class CommandAgentConfig(StrictModel):
    """An agent program run as a subprocess per episode, talking to the gateway through ``OPENAI_BASE_URL``."""

    kind: Literal["command"] = "command"
    command: list[str] = Field(
        min_length=1,
        description="Program and arguments, run without a shell in its own process group. It gets "
        "OPENAI_BASE_URL, OPENAI_API_KEY and AGENTRL_TASK_ID in its environment and must print its reward as the "
        'last line of stdout: {"reward": 1.0} (optionally with reward_components and success).',
    )
    task_input: Literal["stdin", "argv"] = Field(
        "stdin", description="How the task (one JSON object) reaches the program: its stdin, or a last argument."
    )
    cwd: str | None = Field(None, description="Working directory of the program (None: the job's).")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables of the program (added to the job's)."
    )

    def program(self) -> AgentProgram:
        """The runnable agent program."""
        from agentrl.gateway.programs import CommandAgent

        return CommandAgent(self.command, self.task_input, self.cwd, self.env)


AgentConfig = Annotated[PythonAgentConfig | CommandAgentConfig, Field(discriminator="kind")]


class AgentGatewayConfig(StrictModel):
    """Constructor kwargs of AgentGateway-v0: the agent program, its tasks and the episode limits."""

    agent: AgentConfig = Field(
        description="The agent program: {kind: python, entry: 'module:function'} or {kind: command, command: [...]}; "
        "a 'module:function' string or a command list is accepted as shorthand."
    )
    tasks: list[dict[str, Any]] | str = Field(
        description="The tasks: a list of JSON objects, or a .jsonl file (one object per line). Each has a unique "
        "string task_id; the whole object is what the agent receives."
    )
    max_turns: int = Field(16, ge=1, description="Model calls per episode; the next call is refused (truncated).")
    turn_timeout_s: float = Field(
        300.0,
        gt=0,
        description="Longest time the agent may take between a reply and its next request (or its return), counted "
        "while the episode runs; past it the episode fails and the agent is stopped.",
    )
    replayable: bool = Field(
        True,
        description="The agent is deterministic given (task, replies): a partial episode carried across a job "
        "restart is restored by replaying it (verified request by request; a divergence restarts the episode). "
        "Set false for agents with side effects that must not run twice.",
    )
    model_name: str = Field("agentrl-policy", description="The model id the gateway reports and accepts.")

    @field_validator("agent", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"kind": "python", "entry": value}
        if isinstance(value, list):
            return {"kind": "command", "command": value}
        return value


def load_tasks(tasks: list[dict[str, Any]] | str) -> dict[str, dict[str, Any]]:
    """Tasks by id, in order; a ConfigError names the file, the line and the fix for a bad one."""
    source = "env.kwargs.tasks"
    if isinstance(tasks, str):
        path = Path(tasks)
        if not path.is_file():
            raise ConfigError(f"tasks file {tasks!r} does not exist; give a .jsonl file (one JSON task per line)")
        source = str(path)
        rows: list[Any] = []
        for number, line in jsonl_lines(path.read_text(encoding="utf-8")):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{number} is not JSON ({exc.msg}); write one JSON object per line") from exc
        tasks = rows
    by_id: dict[str, dict[str, Any]] = {}
    for index, task in enumerate(tasks):
        task_id = task.get("task_id") if isinstance(task, dict) else None
        if not isinstance(task_id, str) or not task_id:
            raise ConfigError(f"task {index} of {source} has no string task_id: {str(task)[:80]}; give each a task_id")
        if task_id in by_id:
            raise ConfigError(f"task_id {task_id!r} appears twice in {source}; task ids must be unique")
        by_id[task_id] = dict(task)
    if not by_id:
        raise ConfigError(f"{source} holds no tasks; give at least one {{task_id: ...}} object")
    return by_id
