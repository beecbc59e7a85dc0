"""Adapters that bring outside environments and tools in as ``MultiTurnEnv``s: MCP, OpenEnv, Harbor, verifiers."""
