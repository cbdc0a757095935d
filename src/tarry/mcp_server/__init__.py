"""tarry tools as an MCP server whose slow calls and questions live in the store.

``serve(tools, store)`` is a streamable HTTP ASGI app, ``serve_stdio`` the stdio entry point,
and ``tarry mcp serve --tools module:name`` runs either. See ``docs/mcp-server.md``.
"""

from tarry.mcp_server.app import build_server, serve, serve_stdio
from tarry.mcp_server.calls import ServedCalls, served_agent, served_tools
from tarry.mcp_server.request_state import RequestStateSigner
from tarry.mcp_server.served_tasks import ServedTask, ServedTasks
from tarry.mcp_server.stream_events import StreamEvent, StreamEvents

__all__ = [
    "RequestStateSigner",
    "ServedCalls",
    "ServedTask",
    "ServedTasks",
    "StreamEvent",
    "StreamEvents",
    "build_server",
    "serve",
    "serve_stdio",
    "served_agent",
    "served_tools",
]
