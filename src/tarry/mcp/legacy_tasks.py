"""MCP tasks from a plain SDK client, 2025-11-25: task-augmented ``tools/call`` and the ``tasks/*`` requests.

The SDK (``mcp`` 2.3) validates every ``tools/call`` reply as a ``CallToolResult``, so a
task-augmented call, whose reply is a ``CreateTaskResult``, fails in the SDK's own
validation. [`call_tool_as_task`][tarry.mcp.legacy_tasks.call_tool_as_task] sends that one
request on the session's dispatcher instead, with the headers the session would add;
the other requests go through the session as usual. Build the session on a dispatcher
you keep, so you can pass it:

```python
dispatcher = JSONRPCDispatcher(read, write)  # mcp.shared.jsonrpc_dispatcher
async with ClientSession(dispatcher=dispatcher, elicitation_callback=...) as session:
    await session.initialize()
    created = await call_tool_as_task(session, dispatcher, "build", {"release": "1.2"})
    task_id = created.task.task_id
    await get_task(session, task_id)                   # status, status message, poll interval
    result = await task_result(session, task_id)       # waits; questions come to the callback
    await cancel_task(session, task_id)                # or give up on it
```

Against ``tarry mcp serve`` a question the task asks (an approval, a form) comes to the
session's ``elicitation_callback`` while ``tasks/result`` waits. The guide *tarry as an MCP
server* (docs/mcp-server.md) has a whole client.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import CallOptions, Dispatcher
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER

__all__ = ["call_tool_as_task", "cancel_task", "get_task", "task_result"]


async def call_tool_as_task(
    session: ClientSession,
    dispatcher: Dispatcher[Any],
    name: str,
    arguments: dict[str, Any],
    *,
    ttl_ms: int | None = None,
) -> types.CreateTaskResult:
    """Call the tool ``name`` as a task; the server's ``CreateTaskResult`` (``.task`` is the task).

    ``dispatcher`` is the one ``session`` was built on (``ClientSession(dispatcher=...)``).
    ``ttl_ms`` asks the server to keep the task that long after it was created (the server
    may keep it for less); ``None`` leaves the choice to the server.
    """
    params: dict[str, Any] = {"name": name, "arguments": arguments, "task": {} if ttl_ms is None else {"ttl": ttl_ms}}
    # The header in the SDK's own spelling, so the HTTP transport sends it once.
    opts: CallOptions = {"headers": {MCP_PROTOCOL_VERSION_HEADER: session.protocol_version or "2025-11-25"}}
    raw = await dispatcher.send_raw_request("tools/call", params, opts)
    return types.CreateTaskResult.model_validate(raw, by_name=False)


async def get_task(session: ClientSession, task_id: str) -> types.GetTaskResult:
    """The task as the server sees it now (``tasks/get``): its status, status message and poll interval."""
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await session.send_request(request, types.GetTaskResult)


async def task_result(session: ClientSession, task_id: str) -> dict[str, Any]:
    """The tool's result once the task ends (``tasks/result``): the ``CallToolResult`` as a JSON-ready dict.

    Waits until the task is terminal; the server may ask its questions meanwhile, through the
    session's ``elicitation_callback``. A task that failed with an error raises it (``MCPError``).
    """
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    result = await session.send_request(request, types.CallToolResult)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def cancel_task(session: ClientSession, task_id: str) -> types.CancelTaskResult:
    """Ask the server to cancel the task (``tasks/cancel``); the task as it is after that.

    A task that already ended cannot be cancelled: the server answers with an error (``MCPError``).
    """
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    return await session.send_request(request, types.CancelTaskResult)
