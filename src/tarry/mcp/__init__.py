"""MCP servers as tool sources (the ``tarry[mcp]`` extra).

``Chat(tools=[MCPServer(command=[...])])`` or ``MCPServer(url=...)`` makes a server's
tools callable by the model. Input requests, push elicitations and MCP tasks become
paused calls: questions in ``pending_questions()``, [`McpTask`][tarry.mcp.McpTask] in ``pending_tasks()``.
[`OAuthLogin`][tarry.mcp.OAuthLogin] keeps an OAuth-protected server's login in a store; a login a call
needs is a URL question of that call, and the first login (before the tools can be listed)
one of the chat itself. [`JWTBearerLogin`][tarry.mcp.JWTBearerLogin] trades a workload's JWT for a token (RFC 7523);
[`DPoP`][tarry.mcp.DPoP] binds any of these logins' tokens to a key (RFC 9449).
Your own client on the SDK's ``ClientSession`` reaches a server's tasks with
[`tarry.mcp.legacy_tasks`][tarry.mcp.legacy_tasks] (2025-11-25: task-augmented ``tools/call``,
``tasks/get``, ``tasks/result``, ``tasks/cancel``) and
[`tarry.mcp.task_extension`][tarry.mcp.task_extension] (2026-07-28: the SEP-2663 tasks
extension, with ``tasks/update`` to answer a task's input requests).
The other side, tarry tools as an MCP server, is [`tarry.mcp_server`][tarry.mcp_server].
"""

from tarry.mcp._sdk import require_sdk

require_sdk()

from tarry.mcp.client import MCPServer  # noqa: E402
from tarry.mcp.dpop import DPoP  # noqa: E402
from tarry.mcp.jwt_bearer import JWTBearerLogin  # noqa: E402
from tarry.mcp.oauth import LoginRefusedError, LoginRequired, OAuthLogin, StoredTokens  # noqa: E402
from tarry.mcp.protocol_error import ProtocolError  # noqa: E402
from tarry.mcp.receiver import TaskReceiver  # noqa: E402
from tarry.mcp.task import McpTask  # noqa: E402
from tarry.mcp.tool import McpTool  # noqa: E402

__all__ = [
    "DPoP",
    "JWTBearerLogin",
    "LoginRefusedError",
    "LoginRequired",
    "MCPServer",
    "McpTask",
    "McpTool",
    "OAuthLogin",
    "ProtocolError",
    "StoredTokens",
    "TaskReceiver",
]
