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


def fail_then_fix(
    env: CodeAgentEnv, task_id: str, *, train_draft: bool = True, repeat: bool = False
) -> list[Message] | None:
    """The chat of a wrong draft, its feedback and the fix; None when no wrong variant fails a visible example.

    ``train_draft=False`` marks the wrong draft ``"trained": False`` (context the warm-up does not imitate: a
    model trained on it learns the family's typical bug as its first answer). ``repeat=True`` sends the wrong
    draft a second time (never trained) before the fix, so the chat also shows the env's reply to a repeated
    draft and a changed version after it: a small model's most common second reply is its first one again.
    """
    opening, _ = env.reset(seed=0, options={"task_id": task_id})
    task = env.task
    for wrong in task.wrong:
        feedback, _, terminated, _, _ = env.step(code_reply(wrong))
        if not terminated:  # it failed a visible example, so the feedback says how
            chat = [*opening, _draft(wrong, train_draft), *feedback]
            if repeat:
                again, _, _, _, info = env.step(code_reply(wrong))
                if not info.get("repeated"):
                    return None
                chat += [_draft(wrong, False), *again]
            _, _, done, _, info = env.step(code_reply(task.solution))
            if done and info.get("success"):
                return [*chat, assistant(code_reply(task.solution))]
            return None
        opening, _ = env.reset(seed=0, options={"task_id": task_id})  # it passed the examples: try the next one
    return None


def _draft(code: str, trained: bool) -> Message:
    message = assistant(code_reply(code))
    if not trained:
        message["trained"] = False
    return message
