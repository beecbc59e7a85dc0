"""agentrl: multi-turn agentic reinforcement learning for LLMs.

The public surface a user needs to write an environment: ``MultiTurnEnv`` and the message
helpers; everything else lives in its own module (engines, rollout, algos, trainer, config).
"""

from agentrl.env import Message, MultiTurnEnv, assistant, restore_env, system, tool, user
from agentrl.errors import AgentRLError, ConfigError, EngineError, EnvNotFoundError, ModelLoadError, TemplateError

__version__ = "0.1.0"

__all__ = [
    "AgentRLError",
    "ConfigError",
    "EngineError",
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
