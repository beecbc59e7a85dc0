"""CodeExec for the kill/interrupt tests of ``agentrl train`` (importable as ``durability_envs:Class``).

The tiny random model never writes a code block, so plain CodeExec would never start a sandbox;
this one runs a cell at ``reset`` (its sandbox comes from CodeExec's own shared pool), and
gives a third of the tasks long replies, the heavy tail that leaves episodes partial at a step
boundary (``info["max_new_tokens"]`` caps the others at 2 tokens).
"""

from __future__ import annotations

import hashlib
from typing import Any

from envs.code_exec import CodeExecEnv


def is_long(task_id: str) -> bool:
    """A third of the tasks, fixed by their id."""
    return int(hashlib.sha256(task_id.encode()).hexdigest(), 16) % 3 == 0


class SandboxFirstCodeExec(CodeExecEnv):
    """CodeExec whose reset starts the sandbox session (see the module docstring)."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        observation, info = super().reset(seed=seed, options=options)
        self.sandbox.run_python("print('ready')", timeout_s=self.config.cell_timeout_s)
        return observation, info if is_long(self.task.task_id) else {**info, "max_new_tokens": 2}
