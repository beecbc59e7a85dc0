"""A tiny MCP server for the interop tests, built with the SDK's MCPServer (FastMCP in mcp 1.x).

Run as ``python mcp_server.py`` (stdio) or ``python mcp_server.py http PORT`` (streamable HTTP).
Its ``remember``/``recall`` pair keeps state per server process, so tests can tell sessions apart.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("agentrl-test-tools")
CAPITALS = {"kenya": "Nairobi", "peru": "Lima", "japan": "Tokyo"}
_memory: dict[str, str] = {}


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def capital(country: str) -> str:
    """The capital city of a country."""
    if country.lower() not in CAPITALS:
        raise ValueError(f"unknown country {country!r}")
    return CAPITALS[country.lower()]


@server.tool()
def remember(key: str, value: str) -> str:
    """Store a value under a key in this session's memory."""
    _memory[key] = value
    return "ok"


@server.tool()
def recall(key: str) -> str:
    """Read a value stored with remember (empty when absent)."""
    return _memory.get(key, "")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
