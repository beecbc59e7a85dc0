"""The env API: ``MultiTurnEnv`` and its helpers (``base``), its spaces, the contract checked on every
return (``contract``) and the registry (``registry``: ``register_env``, ``make_env``).
"""

from agentrl.env.base import (
    CANARY,
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
from agentrl.env.registry import make_env, register_env

__all__ = [
    "CANARY",
    "EnvInfo",
    "HACK_FLAGS",
    "INFRA_FAILURE",
    "Message",
    "MultiTurnEnv",
    "StepResult",
    "assistant",
    "hack_flags",
    "make_env",
    "register_env",
    "restore_env",
    "system",
    "tool",
    "user",
]
