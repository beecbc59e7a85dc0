"""Concrete agentrl environments (join agentrl env API with sandboxes); importing this registers them."""

from agentrl.env.registry import register_env

register_env("agentrl/GuessNumber-v0", entry_point="envs.guess_number:GuessNumber")
register_env("agentrl/MagicWord-v0", entry_point="envs.magic_word:MagicWord")
register_env("agentrl/CodeExec-v0", entry_point="envs.code_exec:CodeExecEnv")
register_env("agentrl/ToolUse-v0", entry_point="envs.tool_use:ToolUseEnv")
register_env("agentrl/McpTools-v0", entry_point="envs.interop.mcp_env:McpToolsEnv")
register_env("agentrl/OpenEnv-v0", entry_point="envs.interop.openenv_env:OpenEnvEnv")
register_env("agentrl/Harbor-v0", entry_point="envs.interop.harbor:HarborEnv")
register_env("agentrl/BFCL-MultiTurn-v0", entry_point="envs.interop.bfcl.env:BfclMultiTurnEnv")
register_env("agentrl/Verifiers-v0", entry_point="envs.interop.verifiers_env:VerifiersEnv")
register_env("agentrl/AgentGateway-v0", entry_point="agentrl.gateway.env:AgentGatewayEnv")
register_env("agentrl/CodeAgent-v0", entry_point="envs.code_agent:CodeAgentEnv")
