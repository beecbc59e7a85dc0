"""The env API: ``MultiTurnEnv`` and its helpers (``base``), its spaces, the contract checked on every
return (``contract``) and the registry (``registry``: ``register_env``, ``make_env``).
"""

from agentrl.env.base import (
    HACK_FLAGS,
    INFRA_FAILURE,
    EnvInfo,
    Message,
    MultiTurnEnv,
    StepResult,
    assistant,
    hack_flags,
    restore_env,
    system,
    tool,
    user,
)

__all__ = [
    "EnvInfo",
    "HACK_FLAGS",
    "INFRA_FAILURE",
    "Message",
    "MultiTurnEnv",
    "StepResult",
    "assistant",
    "hack_flags",
    "restore_env",
    "system",
    "tool",
    "user",
]
