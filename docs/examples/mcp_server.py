"""The smallest MCP server, for the docs' example (python3 docs/examples/mcp_server.py):
one tool over stdio, written with the official SDK (pip install 'jsonagent[mcp]')."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("forecast")


@server.tool()
def forecast(city: str) -> str:
    """Tomorrow's weather in a city."""
    return f"{city}: sunny, 21 °C"


server.run()
