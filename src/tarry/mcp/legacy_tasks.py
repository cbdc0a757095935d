"""The 2025-11-25 task requests, on the mcp 2.3 SDK (the SDK workaround lives here, and only here).

The SDK validates every ``tools/call`` reply as a ``CallToolResult``, so a task-augmented
call (whose reply is a ``CreateTaskResult``) is sent on the dispatcher as a raw request,
with the protocol version header the session would add (in the SDK's own spelling, so the
HTTP transport sends it once). ``tasks/get``, ``tasks/result``
and ``tasks/cancel`` go through the session's typed ``send_request``.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import CallOptions, Dispatcher
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER


async def call_tool_as_task(
    session: ClientSession,
    dispatcher: Dispatcher[Any],
    name: str,
    arguments: dict[str, Any],
    ttl_ms: int | None,
) -> types.CreateTaskResult:
    """Send a task-augmented ``tools/call`` and return the server's ``CreateTaskResult``."""
    params: dict[str, Any] = {"name": name, "arguments": arguments, "task": {} if ttl_ms is None else {"ttl": ttl_ms}}
    opts: CallOptions = {"headers": {MCP_PROTOCOL_VERSION_HEADER: session.protocol_version or "2025-11-25"}}
    raw = await dispatcher.send_raw_request("tools/call", params, opts)
    return types.CreateTaskResult.model_validate(raw, by_name=False)


async def get_task(session: ClientSession, task_id: str) -> types.GetTaskResult:
    """One ``tasks/get``."""
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await session.send_request(request, types.GetTaskResult)


async def task_result(session: ClientSession, task_id: str) -> dict[str, Any]:
    """``tasks/result``: blocks until the task is terminal; the tool's ``CallToolResult`` in wire form."""
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    result = await session.send_request(request, types.CallToolResult)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def cancel_task(session: ClientSession, task_id: str) -> types.CancelTaskResult:
    """``tasks/cancel``."""
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    return await session.send_request(request, types.CancelTaskResult)
