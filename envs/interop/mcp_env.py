"""McpTools-v0: answer questions with tools served by an MCP server; graded like ToolUse-v0.

The tasks (question + expected answer) come from a JSONL file or inline rows; the tools come from
any MCP server (``agentrl.tools.mcp``). Each env instance owns one MCP session, so a stateful
server never shares state between concurrent episodes (``fresh_session`` also clears it between
an env's successive episodes); ``reset`` reopens a session whose server died.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentrl.env import Message, MultiTurnEnv, StepResult, system, user
from agentrl.errors import ConfigError, PreflightError
from agentrl.tools.mcp import McpError, McpToolsConfig, McpToolSource
from agentrl.tools.toolcall import has_tool_call
from agentrl.util.jsonl import jsonl_lines
from envs.tool_use.env import parse_answer, score_answer

INSTRUCTIONS = (
    "Answer the question. Call the tools when they help. When you know the answer, reply with a final line "
    "'Answer: <value>'."
)


class QaTask(BaseModel):
    """One question with its expected answer (a number or a name)."""

    model_config = ConfigDict(extra="forbid")
    task_id: str
    question: str
    answer: float | str


class McpToolsEnvConfig(BaseModel):
    """Constructor kwargs of McpTools-v0."""

    model_config = ConfigDict(extra="forbid")
    mcp: McpToolsConfig = Field(description="The MCP server that provides the tools (agentrl.tools.mcp).")
    tasks: str | list[QaTask] = Field(description="A JSONL file of {task_id, question, answer} rows, or the rows.")
    instructions: str = Field(INSTRUCTIONS, description="System prompt of every episode.")
    max_turns: int = Field(4, ge=1, description="Assistant turns before the episode is truncated.")
    reward: str = Field("exact", pattern="^(exact|graded)$", description="exact, or graded partial credit.")
    fresh_session: bool = Field(
        False,
        description="Restart the MCP session at every reset (a stateful server starts each episode clean, so replay "
        "is exact); False keeps one session per env (fast; right for stateless tool servers).",
    )

    @field_validator("tasks")
    @classmethod
    def _existing_file(cls, value: str | list[QaTask]) -> str | list[QaTask]:
        if isinstance(value, str) and not Path(value).is_file():
            raise ValueError(f"task file {value!r} does not exist; give a JSONL path or a list of rows")
        return value


def load_tasks(source: str | list[QaTask]) -> list[QaTask]:
    """The task rows of a JSONL file (ConfigError names the bad line) or the inline list."""
    if not isinstance(source, str):
        return list(source)
    rows = []
    for number, line in jsonl_lines(Path(source).read_text(encoding="utf-8")):
        try:
            rows.append(QaTask.model_validate(json.loads(line)))
        except ValueError as exc:
            raise ConfigError(f"{source}:{number}: not a {{task_id, question, answer}} row: {exc}") from exc
    return rows


class McpToolsEnv(MultiTurnEnv):
    """Questions answered with tools listed and called over MCP; reward 1 for the right 'Answer:'."""

    config_model = McpToolsEnvConfig

    def __init__(self, **kwargs: Any) -> None:
        self.config = McpToolsEnvConfig(**kwargs)
        self.max_turns = self.config.max_turns
        self._tasks = {task.task_id: task for task in load_tasks(self.config.tasks)}
        if not self._tasks:
            raise ConfigError(f"McpTools-v0 task source {self.config.tasks!r} has no rows")
        self.tools_source = McpToolSource(self.config.mcp)
        self.task = next(iter(self._tasks.values()))
        self.turn = 0

    def task_ids(self) -> list[str]:
        """Ids of the task rows, in file order."""
        return list(self._tasks)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The MCP server's tools (listed once per env)."""
        return self.tools_source.schemas()

    def preflight(self) -> list[str]:
        """Start the MCP server and list its tools."""
        try:
            names = [schema["function"]["name"] for schema in self.tool_schemas()]
        except McpError as exc:
            raise PreflightError(str(exc)) from exc
        return [f"MCP server {self.config.mcp.server.transport}: tools {', '.join(names)}"]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        """Start ``options['task_id']`` (else one drawn with ``seed``); reopens a dead MCP session."""
        super().reset(seed=seed)
        task_id = self.choose_task_id(options, self._tasks, "the McpTools-v0 task set")
        self.task, self.turn = self._tasks[task_id], 0
        if self.config.fresh_session:
            self.tools_source.close()
        self.tools_source.start()
        return [system(self.config.instructions), user(self.task.question)], {"task_id": task_id}

    def step(self, action: str) -> StepResult:
        """Run the turn's tool calls over MCP, or grade its answer."""
        self.turn += 1
        truncated = self.turn >= self.max_turns
        if has_tool_call(action):
            messages = self.tools_source.execute(action)
            errors = sum(m["content"].startswith("Error:") for m in messages)
            return messages, 0.0, False, truncated, {"tool_calls": len(messages), "tool_errors": errors}
        answer = parse_answer(action)
        if answer is None:
            hint = user("Call a tool, or give your final line as 'Answer: <value>'.")
            return [hint], 0.0, False, truncated, {"success": False}
        score = score_answer(answer, self.task.answer, self.config.reward)
        info = {"answer": answer, "success": score >= 1.0, "reward_components": {"answer": score}}
        return [], score, True, False, info

    def close(self) -> None:
        """Stop the MCP session (and a stdio server process)."""
        self.tools_source.close()
