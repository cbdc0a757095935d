"""MCP tasks from a plain SDK client, 2026-07-28: the SEP-2663 tasks extension (``io.modelcontextprotocol/tasks``).

The SDK (``mcp`` 2.3) has no client for this extension. A client that declares it, with a
result claim for ``resultType: "task"``, lets the server answer ``tools/call`` with a task
rather than hold the request open; it then asks ``tasks/get`` for the task's status (and
its input requests, its result or its error), answers the input requests with
``tasks/update``, and may ``tasks/cancel`` it. These helpers do that on a ``ClientSession``:

```python
async with ClientSession(read, write, **session_options()) as session:
    await session.discover()                            # a 2026-07-28 connection
    reply = await call_tool(session, "build", {"release": "1.2"})
    if isinstance(reply, TaskCreated):                  # else a CallToolResult or an InputRequiredResult
        task = await get_task(session, reply.task_id)   # poll every task.poll_interval_ms
        if task.status == "input_required":
            await update_task(session, reply.task_id, {key: {"action": "accept", "content": {...}}})
        ...                                             # once completed: task.result
```

The guide *tarry as an MCP server* (docs/mcp-server.md) has a whole client against
``tarry mcp serve``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal, TypedDict

import mcp_types as types
from mcp.client.extension import ClaimContext, ResultClaim
from mcp.client.session import ClientSession
from pydantic import ConfigDict, Field, TypeAdapter

__all__ = [
    "DONE",
    "EXTENSION",
    "DetailedTask",
    "SessionOptions",
    "TaskCreated",
    "TaskFields",
    "call_tool",
    "cancel_task",
    "claims",
    "get_task",
    "session_options",
    "update_task",
]

EXTENSION = "io.modelcontextprotocol/tasks"
"""The extension's identifier, the key of ``extensions`` in the client's capabilities."""
DONE = ("completed", "failed", "cancelled")
"""The statuses a task ends in: poll ``get_task`` until its status is one of these."""

_RESPONSE: TypeAdapter[types.InputResponse] = TypeAdapter(types.InputResponse)


class TaskFields(types.Result):
    """What every SEP-2663 task carries: its id, status and times (the wire's camelCase names are aliases)."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    task_id: str = Field(alias="taskId")
    status: Literal["working", "input_required", "completed", "failed", "cancelled"]
    status_message: str | None = Field(default=None, alias="statusMessage")
    created_at: str | None = Field(default=None, alias="createdAt")
    last_updated_at: str | None = Field(default=None, alias="lastUpdatedAt")
    ttl_ms: int | None = Field(default=None, alias="ttlMs")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class TaskCreated(TaskFields):
    """A ``tools/call`` the server answered with a task.

    Ask [`get_task`][tarry.mcp.task_extension.get_task] about it, every ``poll_interval_ms``.
    """

    result_type: Literal["task"] = Field(alias="resultType")


class DetailedTask(TaskFields):
    """The task as ``tasks/get`` shows it.

    ``input_requests`` while it is ``input_required`` (each keyed as its answer must be, in
    [`update_task`][tarry.mcp.task_extension.update_task]), ``result`` (the tool's
    ``CallToolResult``, a dict) once ``completed``, ``error`` (a JSON-RPC error object) once
    ``failed``.
    """

    result_type: str | None = Field(default=None, alias="resultType")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = Field(default=None, alias="inputRequests")


class _Ack(types.Result):
    model_config = ConfigDict(extra="allow")


class _TaskParams(types.RequestParams):
    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(serialization_alias="taskId")
    input_responses: dict[str, Any] | None = Field(default=None, serialization_alias="inputResponses")


class _TaskRequest(types.Request[_TaskParams, str]):
    method: str
    params: _TaskParams
    name_param: ClassVar[str | None] = "taskId"


async def _unresolved(result: TaskCreated, context: ClaimContext) -> types.CallToolResult:
    raise RuntimeError("the tool answered with a task: call it with tarry.mcp.task_extension.call_tool")


def claims() -> dict[str, Sequence[ResultClaim[Any]]]:
    """The result claims to give ``ClientSession(result_claims=...)``: a ``tools/call`` may answer with a task."""
    return {EXTENSION: (ResultClaim(result_type="task", model=TaskCreated, resolve=_unresolved),)}


class SessionOptions(TypedDict):
    """The ``ClientSession`` keyword arguments that declare the extension."""

    extensions: dict[str, dict[str, Any]]
    result_claims: dict[str, Sequence[ResultClaim[Any]]]


def session_options() -> SessionOptions:
    """The ``ClientSession`` keyword arguments that declare the extension.

    ``ClientSession(read, write, **session_options())``: the session offers the extension
    and takes a task as the answer to ``tools/call``.
    """
    return {"extensions": {EXTENSION: {}}, "result_claims": claims()}


async def call_tool(
    session: ClientSession,
    name: str,
    arguments: dict[str, Any],
    *,
    input_responses: dict[str, Any] | None = None,
    request_state: str | None = None,
) -> TaskCreated | types.CallToolResult | types.InputRequiredResult:
    """Call the tool ``name``: a [`TaskCreated`][tarry.mcp.task_extension.TaskCreated] when the server made a task.

    Otherwise the tool's ``CallToolResult``, or an ``InputRequiredResult``: the server asks
    something before the call goes on; call again with the answers in ``input_responses``
    (keyed as its ``input_requests``; SDK results or their JSON form, such as
    ``{"action": "accept", "content": {...}}``) and its ``request_state``. Only a session built
    with [`session_options()`][tarry.mcp.task_extension.session_options] gets tasks; without
    them a server holds the call open, or asks in the call.
    """
    responses: types.InputResponses | None = None
    if input_responses is not None:
        responses = {key: _RESPONSE.validate_python(value) for key, value in input_responses.items()}
    reply = await session.call_tool(
        name, arguments, input_responses=responses, request_state=request_state,
        allow_input_required=True, allow_claimed=True,
    )  # fmt: skip
    if isinstance(reply, TaskCreated | types.CallToolResult | types.InputRequiredResult):
        return reply
    raise TypeError(f"tools/call answered with a result this client does not know: {reply!r}")


async def get_task(session: ClientSession, task_id: str) -> DetailedTask:
    """The task as the server sees it now (``tasks/get``): its status, and its input requests, result or error."""
    return await session.send_request(
        _TaskRequest(method="tasks/get", params=_TaskParams(task_id=task_id)), DetailedTask
    )


async def update_task(session: ClientSession, task_id: str, responses: dict[str, Any]) -> None:
    """Answer some or all of the task's input requests (``tasks/update``), keyed as ``input_requests`` are.

    Each answer is an SDK result (``ElicitResult``) or its JSON form, such as
    ``{"action": "accept", "content": {"colour": "blue"}}``. A server may ask again what is
    left unanswered: [`get_task`][tarry.mcp.task_extension.get_task] shows what still waits.
    """
    params = _TaskParams(task_id=task_id, input_responses=responses)
    await session.send_request(_TaskRequest(method="tasks/update", params=params), _Ack)


async def cancel_task(session: ClientSession, task_id: str) -> None:
    """Ask the server to cancel the task (``tasks/cancel``).

    The answer is only an acknowledgement: cancelling is cooperative, so
    [`get_task`][tarry.mcp.task_extension.get_task] tells when the task is ``cancelled``.
    """
    await session.send_request(_TaskRequest(method="tasks/cancel", params=_TaskParams(task_id=task_id)), _Ack)
