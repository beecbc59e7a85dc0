"""Scripted CodeAgent-v0 episodes for a supervised warm-up: a wrong draft, the env's real feedback, the fix.

Every message comes from the env itself (``reset``/``step`` in a real sandbox), so a trace shows the
protocol exactly as RL will: a plausible wrong solution of the task's family that fails a visible
example, the feedback it gets, then the reference solution, which the env grades as a success.
"""

from __future__ import annotations

from agentrl.env import Message, assistant
from envs.code_agent.env import CodeAgentEnv


def code_reply(code: str) -> str:
    """An assistant turn as the model writes it: one python block (the rollout stops at its closing fence)."""
    return f"```python\n{code.rstrip()}\n```"


def fail_then_fix(env: CodeAgentEnv, task_id: str) -> list[Message] | None:
    """The chat of a wrong draft, its feedback and the fix; None when no wrong variant fails a visible example."""
    opening, _ = env.reset(seed=0, options={"task_id": task_id})
    task = env.task
    for wrong in task.wrong:
        feedback, _, terminated, _, _ = env.step(code_reply(wrong))
        if not terminated:  # it failed a visible example, so the feedback says how
            _, _, done, _, info = env.step(code_reply(task.solution))
            if done and info.get("success"):
                return [*opening, assistant(code_reply(wrong)), *feedback, assistant(code_reply(task.solution))]
            return None
        opening, _ = env.reset(seed=0, options={"task_id": task_id})  # it passed the examples: try the next one
    return None
