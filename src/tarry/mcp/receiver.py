"""tarry as the receiver of task-augmented ``elicitation/create`` requests (MCP 2025-11-25).

A server may ask its question as a task: tarry creates the task at once, asks the person
in the background, and serves ``tasks/get``, ``tasks/result`` (blocking until the task is
terminal) and ``tasks/cancel`` about it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.dispatcher import CallOptions, OnNotify, OnNotifyIntercept, OnRequest
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

logger = logging.getLogger("tarry.mcp")

RELATED_TASK = "io.modelcontextprotocol/related-task"
TASKS_CAPABILITY: dict[str, Any] = {"cancel": {}, "requests": {"elicitation": {"create": {}}}}
_DONE = ("completed", "failed", "cancelled")
_LEGAL = {
    "working": {"input_required", "completed", "failed", "cancelled"},
    "input_required": {"working", "completed", "failed", "cancelled"},
}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ReceivedTask:
    """A task tarry runs for a server: one question to a person."""

    def __init__(self, task_id: str, created_at: datetime, ttl_ms: int, poll_ms: int) -> None:
        self.task_id = task_id
        self.status = "working"
        self.status_message: str | None = None
        self.created_at = created_at
        self.last_updated_at = created_at
        self.ttl_ms = ttl_ms
        self.poll_ms = poll_ms
        self.result: dict[str, Any] | None = None
        self.error: types.ErrorData | None = None
        self.finished = asyncio.Event()
        self.work: asyncio.Task[None] | None = None

    @property
    def expires_at(self) -> datetime:
        """When the task is gone: ``createdAt`` + ``ttl``."""
        return self.created_at + timedelta(milliseconds=self.ttl_ms)

    def move(self, status: str, now: datetime, message: str | None = None) -> bool:
        """Change the status if the protocol allows it; a terminal task never changes."""
        if status not in _LEGAL.get(self.status, set()):
            return False
        self.status, self.last_updated_at = status, now
        if message is not None:
            self.status_message = message
        if status in _DONE:
            self.finished.set()
        return True

    def wire(self) -> dict[str, Any]:
        """The task as the protocol's ``Task`` object."""
        data: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": _iso(self.created_at),
            "lastUpdatedAt": _iso(self.last_updated_at),
            "ttl": self.ttl_ms,
            "pollInterval": self.poll_ms,
        }
        if self.status_message is not None:
            data["statusMessage"] = self.status_message
        return data


Work = Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]


class TaskReceiver:
    """The tasks tarry received from one server connection, and the protocol's answers about them.

    Ids carry 256 random bits from ``secrets``; ``ttl`` (ms, from creation) is the
    requested one clamped to ``max_ttl_ms`` (``default_ttl_ms`` when none is asked);
    an expired task is gone (``-32602``). ``now`` is the clock (aware UTC).
    """

    def __init__(
        self,
        work: Work,
        *,
        default_ttl_ms: int = 600_000,
        max_ttl_ms: int = 3_600_000,
        poll_ms: int = 1000,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.work = work
        self.default_ttl_ms = default_ttl_ms
        self.max_ttl_ms = max_ttl_ms
        self.poll_ms = poll_ms
        self.now = now
        self.tasks: dict[str, ReceivedTask] = {}

    def start(self, params: Mapping[str, Any], ttl: Any) -> dict[str, Any]:
        """Create a task for a task-augmented request and start its work; returns ``CreateTaskResult``."""
        asked = ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0 else self.default_ttl_ms
        task = ReceivedTask(secrets.token_urlsafe(32), self.now(), min(asked, self.max_ttl_ms), self.poll_ms)
        self._purge()
        self.tasks[task.task_id] = task
        task.work = asyncio.get_running_loop().create_task(self._run(task, dict(params)))
        return {"task": task.wire()}

    async def _run(self, task: ReceivedTask, params: dict[str, Any]) -> None:
        try:
            result = await self.work(params)
        except asyncio.CancelledError:
            return
        except MCPError as error:
            task.error = error.error
            task.move("failed", self.now(), error.error.message)
        except Exception as error:
            logger.warning("A received task's work failed: %s", type(error).__name__)
            task.error = types.ErrorData(code=types.INTERNAL_ERROR, message="The client could not answer")
            task.move("failed", self.now(), "The client could not answer")
        else:
            task.result = result
            task.move("completed", self.now())

    def _purge(self) -> None:
        now = self.now()
        for task_id, task in list(self.tasks.items()):
            if now >= task.expires_at:
                if task.work is not None:
                    task.work.cancel()
                del self.tasks[task_id]

    def _find(self, params: Mapping[str, Any] | None, verb: str) -> ReceivedTask:
        self._purge()
        task_id = (params or {}).get("taskId")
        task = self.tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None:
            raise MCPError(types.INVALID_PARAMS, f"Failed to {verb} task: Task not found")
        return task

    async def serve(self, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """Answer ``tasks/get``, ``tasks/result`` or ``tasks/cancel``."""
        if method == "tasks/get":
            return self._find(params, "retrieve").wire()
        if method == "tasks/cancel":
            task = self._find(params, "cancel")
            if not task.move("cancelled", self.now(), "Cancelled by the server"):
                raise MCPError(types.INVALID_PARAMS, f"Cannot cancel task: already in terminal status '{task.status}'")
            if task.work is not None:
                task.work.cancel()
            return task.wire()
        if method == "tasks/result":
            task = self._find(params, "retrieve")
            await task.finished.wait()
            if task.status == "cancelled":
                raise MCPError(types.INVALID_PARAMS, "Task was cancelled")
            if task.error is not None:
                raise MCPError.from_error_data(task.error)
            return {**(task.result or {}), "_meta": {RELATED_TASK: {"taskId": task.task_id}}}
        raise MCPError(types.METHOD_NOT_FOUND, "Method not found", method)

    def close(self) -> None:
        """Stop every task's work (the connection ended)."""
        for task in self.tasks.values():
            if task.work is not None:
                task.work.cancel()
        self.tasks.clear()


class ReceiverDispatcher(JSONRPCDispatcher[Any]):
    """A JSON-RPC dispatcher that declares the client's ``tasks`` capability and routes task requests to a receiver.

    Everything else goes to the SDK's session as usual.
    """

    def __init__(self, *args: Any, receiver: TaskReceiver, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.receiver = receiver

    @property
    def closed(self) -> bool:
        """True once the transport ended (set before the SDK wakes the waiting requests with ``CONNECTION_CLOSED``)."""
        return bool(self._closed)

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Add ``capabilities.tasks`` to ``initialize``; send everything as the SDK would."""
        if method == "initialize" and params is not None:
            capabilities = {**params.get("capabilities", {}), "tasks": TASKS_CAPABILITY}
            params = {**params, "capabilities": capabilities}
        return await super().send_raw_request(method, params, opts, **kwargs)

    async def run(
        self,
        on_request: OnRequest,
        on_notify: OnNotify,
        on_notify_intercept: OnNotifyIntercept | None = None,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run the SDK's loop with task requests answered here."""
        receiver = self.receiver

        async def handle(dctx: Any, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
            if method == "elicitation/create" and params is not None and "task" in params:
                plain = {key: value for key, value in params.items() if key != "task"}
                return receiver.start(plain, (params.get("task") or {}).get("ttl"))
            if method in ("tasks/get", "tasks/result", "tasks/cancel"):
                return await receiver.serve(method, params)
            return await on_request(dctx, method, params)

        try:
            await super().run(handle, on_notify, on_notify_intercept, task_status=task_status)
        finally:
            receiver.close()
