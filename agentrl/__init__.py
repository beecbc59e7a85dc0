"""agentrl: multi-turn agentic reinforcement learning for LLMs.

The public surface a user needs to write an environment: ``MultiTurnEnv``, the message helpers and
``EnvInfo`` (the info keys agentrl reads); everything else lives in its own module (engines, rollout,
algos, trainer, config).
"""

from agentrl.env import EnvInfo, Message, MultiTurnEnv, assistant, restore_env, system, tool, user
from agentrl.errors import (
    AgentRLError,
    ConfigError,
    EngineError,
    EnvContractError,
    EnvNotFoundError,
    ModelLoadError,
    TemplateError,
)

__version__ = "0.1.0"

__all__ = [
    "AgentRLError",
    "ConfigError",
    "EngineError",
    "EnvContractError",
    "EnvInfo",
    "EnvNotFoundError",
    "Message",
    "ModelLoadError",
    "MultiTurnEnv",
    "TemplateError",
    "assistant",
    "restore_env",
    "system",
    "tool",
    "user",
]
