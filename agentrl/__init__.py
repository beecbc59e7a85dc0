"""agentrl: multi-turn agentic reinforcement learning for LLMs."""

from agentrl.env import MultiTurnEnv, Message, system, tool, user
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
    "system",
    "tool",
    "user",
]
