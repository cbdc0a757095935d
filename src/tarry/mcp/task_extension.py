"""The SEP-2663 tasks extension (``io.modelcontextprotocol/tasks``) on 2026-07-28 connections.

The client declares the extension with a result claim for ``resultType: "task"``, so
``tools/call`` may answer with a task; ``tasks/get``, ``tasks/update`` and ``tasks/cancel``
are sent through the session (which adds the per-request ``_meta``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import mcp_types as types
from mcp.client.extension import ClaimContext, ResultClaim
from mcp.client.session import ClientSession
from pydantic import ConfigDict, Field

EXTENSION = "io.modelcontextprotocol/tasks"


class TaskFields(types.Result):
    """The flat task fields of a SEP-2663 task (read from the wire)."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    task_id: str = Field(alias="taskId")
    status: Literal["working", "input_required", "completed", "failed", "cancelled"]
    status_message: str | None = Field(default=None, alias="statusMessage")
    created_at: str | None = Field(default=None, alias="createdAt")
    last_updated_at: str | None = Field(default=None, alias="lastUpdatedAt")
    ttl_ms: int | None = Field(default=None, alias="ttlMs")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class TaskCreated(TaskFields):
    """A ``tools/call`` answered with a task."""

    result_type: Literal["task"] = Field(alias="resultType")


class DetailedTask(TaskFields):
    """A ``tasks/get`` answer: the task, with its result, error or input requests."""

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
    raise RuntimeError("tarry keeps MCP tasks as paused calls; call tools with allow_claimed=True")


def claims() -> dict[str, tuple[ResultClaim[Any], ...]]:
    """The result claims to give ``ClientSession(result_claims=...)``."""
    return {EXTENSION: (ResultClaim(result_type="task", model=TaskCreated, resolve=_unresolved),)}


async def get_task(session: ClientSession, task_id: str) -> DetailedTask:
    """One ``tasks/get``."""
    return await session.send_request(
        _TaskRequest(method="tasks/get", params=_TaskParams(task_id=task_id)), DetailedTask
    )


async def update_task(session: ClientSession, task_id: str, responses: dict[str, Any]) -> None:
    """``tasks/update`` with answers to the task's input requests."""
    params = _TaskParams(task_id=task_id, input_responses=responses)
    await session.send_request(_TaskRequest(method="tasks/update", params=params), _Ack)


async def cancel_task(session: ClientSession, task_id: str) -> None:
    """``tasks/cancel`` (an acknowledgement only; cancelling is cooperative)."""
    await session.send_request(_TaskRequest(method="tasks/cancel", params=_TaskParams(task_id=task_id)), _Ack)
