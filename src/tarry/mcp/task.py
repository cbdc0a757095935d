"""``McpTask``: a paused MCP tool call, saved so that any process carries it on."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from tarry.messages import ToolCall
from tarry.tasks import Task

logger = logging.getLogger("tarry.mcp")


class TaskSteps(Protocol):
    """What checks on and cancels a server's task (``tarry.mcp.flow.Steps``, bound to a connection)."""

    async def refresh(self, task: McpTask) -> None:
        """One ``tasks/get``."""

    async def cancel(self, task: McpTask) -> None:
        """``tasks/cancel``."""


class McpTask(Task):
    """The task of an MCP tool call that waits: on input requests, or on a server's task.

    ``data`` holds the protocol state another process needs, saved with the call and never
    logged: ``kind`` (``"input"`` for 2026-07-28 input requests, ``"task"`` for a server's
    task, ``"consent"`` for a call the server refused until the person visits URLs: the
    -32042 error), ``era`` (the protocol version), ``server`` and ``tool`` (the server's
    name for the tool); for input requests and consents the ``round``, for input requests
    the byte-exact ``request_state``; for
    tasks the ``task_id``, ``created_at`` (ISO 8601), ``ttl_ms`` and ``checked_at`` (when
    the server was last asked, ISO 8601 UTC).

    ``refresh()`` is one ``tasks/get``; ``cancel()`` sends ``tasks/cancel``; ``expires_at``
    is ``createdAt`` + ``ttl``; ``poll_interval`` is in seconds. A resume sends no
    ``tasks/get`` before ``poll_interval`` has passed since ``checked_at`` (in any process),
    unless it has answers to send.
    """

    steps: TaskSteps | None = None
    """What refreshes and cancels the task on its server's connection (set when the tool rebuilds it)."""

    @classmethod
    def load(cls, state: Mapping[str, Any], tool_call: ToolCall | None = None) -> McpTask:
        """The task ``state`` describes (a [`to_dict`][tarry.Task.to_dict] result)."""
        task = super().load(state, tool_call=tool_call)
        assert isinstance(task, McpTask)
        return task

    @property
    def kind(self) -> str:
        """``"input"``, ``"task"`` or ``"consent"``."""
        return str(self.data.get("kind", ""))

    @property
    def task_id(self) -> str | None:
        """The server's task id, for a server's task."""
        value = self.data.get("task_id")
        return value if isinstance(value, str) else None

    @property
    def expires_at(self) -> datetime | None:
        """``createdAt`` + ``ttl`` of a server's task (aware UTC), or ``None``."""
        created, ttl = self.data.get("created_at"), self.data.get("ttl_ms")
        if not isinstance(created, str) or not isinstance(ttl, int | float):
            return None
        try:
            moment = datetime.fromisoformat(created.replace("Z", "+00:00"))
        except ValueError:
            return None
        if moment.tzinfo is None:
            return None
        return moment + timedelta(milliseconds=ttl)

    async def refresh(self) -> McpTask:
        """Check on the server's task once (one ``tasks/get``) and return the task."""
        if self.kind == "task" and self.steps is not None:
            await self.steps.refresh(self)
        return self

    async def cancel(self) -> McpTask:
        """Send ``tasks/cancel`` for a server's task; the task is then cancelled."""
        if self.kind == "task" and self.steps is not None and not self.done():
            try:
                await self.steps.cancel(self)
            except Exception as error:  # the server's words may quote the task id: keep them out of the logs
                logger.warning("tasks/cancel failed for a %s task (%s)", self.data.get("tool"), type(error).__name__)
        if not self.done():
            self.status = "cancelled"
        return self

    def __repr__(self) -> str:
        return f"McpTask(kind={self.kind!r}, status={self.status!r}, tool={self.data.get('tool')!r})"
