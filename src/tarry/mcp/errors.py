"""What goes wrong between tarry and an MCP server, as tarry tells it apart."""

from __future__ import annotations


class ConnectionLost(ConnectionError):
    """The connection to an MCP server closed during a request (the server may have crashed).

    Not a server's error answer: a server may answer with the code the SDK uses for a
    closed connection (-32000, JSON-RPC's generic server error), which stays an ``MCPError``.
    """
