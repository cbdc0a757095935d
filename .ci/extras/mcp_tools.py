"""Both sides of check_mcp.py: an MCP server written with the SDK (run as a script), and tarry tools that
``tarry mcp serve --tools mcp_tools:TOOLS`` serves."""

from __future__ import annotations

from tarry import Field, Task, Tool, tool


@tool
def add(a: int, b: int) -> str:
    """Adds two integers."""
    return str(a + b)


class PickColour(Tool):
    """Asks which colour to paint a wall."""

    def execute(self, wall: str) -> Task:
        return self.ask("Which colour?", colour=Field(choices=["red", "blue"]))

    def resume(self, task: Task, wall: str) -> str:
        return f"{wall}: {task.answer['colour']}"


TOOLS = [add, PickColour()]
"""What ``tarry mcp serve`` serves."""


if __name__ == "__main__":  # a server written with the SDK, over stdio
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("sums")

    @server.tool()
    def multiply(a: int, b: int) -> str:
        """Multiplies two integers."""
        return str(a * b)

    server.run()
