"""Tools: typed Python functions as tools (``base``), the ``<tool_call>`` wire format (``toolcall``) and
MCP servers' tools (``mcp``, optional extra ``agentrl[mcp]``).
"""

from agentrl.tools.base import (
    Tool,
    ToolDocWarning,
    as_tool,
    execute_tool_calls,
    run_tool_call,
    template_supports_tools,
    tools_system_prompt,
    with_tools_prompt,
)

__all__ = [
    "Tool",
    "ToolDocWarning",
    "as_tool",
    "execute_tool_calls",
    "run_tool_call",
    "template_supports_tools",
    "tools_system_prompt",
    "with_tools_prompt",
]
