"""ToolUse-v0: questions answered by calling typed Python tools."""

from envs.tool_use.env import ToolUseConfig, ToolUseEnv

__all__ = ["ToolUseConfig", "ToolUseEnv"]
