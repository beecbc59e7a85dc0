"""CodeAgent-v0: multi-turn coding with execution feedback on generated tasks (``envs.code_tasks``)."""

from envs.code_agent.config import CodeAgentConfig
from envs.code_agent.env import CodeAgentEnv

__all__ = ["CodeAgentConfig", "CodeAgentEnv"]
