"""``subscriptions/listen`` for served tasks (2026-07-28, SEP-2575 with SEP-2663's ``taskIds``).

A client that declared the tasks extension names tasks in the listen request's
``notifications.taskIds``; the stream acknowledges the ones it may see (its own, unexpired),
then sends ``notifications/tasks`` (the task as ``tasks/get`` shows it) at once and each time
one of them changes, and ends once all of them ended. ``toolsListChanged`` is honoured too (the
SDK advertises ``tools.listChanged`` once listening is served): it never fires, as a tarry
server's tools are fixed, and such a stream stays open until the client leaves. The change may be made by any process:
``StoreChanges`` wakes the stream when the store changes (LISTEN/NOTIFY on
PostgreSQL, the file's ``data_version`` on SQLite), and it looks again at the task's poll
interval in any case.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY

from tarry.mcp_server.calls import CallState, ServedCalls
from tarry.mcp_server.served_tasks import ServedTask
from tarry.store.changes import wait_for

INVALID_REQUEST = -32600
Detailed = Callable[[ServedTask, CallState], dict[str, Any]]


class TasksNotification(types.Notification[dict[str, Any], Literal["notifications/tasks"]]):
    """``notifications/tasks``: a task's detailed state, on a listen stream that asked for it."""

    method: Literal["notifications/tasks"] = "notifications/tasks"
    params: dict[str, Any]


class TaskListener:
    """The ``subscriptions/listen`` handler: status notifications for the tasks a client names.

    ``owner(ctx)`` is who the request acts for (a task of another owner is not acknowledged),
    ``declares_tasks(ctx)`` whether it declared the tasks extension, and ``detailed(task, state)``
    the task as ``tasks/get`` shows it.
    """

    def __init__(
        self,
        calls: ServedCalls,
        owner: Callable[[Any], str | None],
        declares_tasks: Callable[[Any], bool],
        detailed: Detailed,
    ) -> None:
        self.calls = calls
        self.owner = owner
        self.declares_tasks = declares_tasks
        self.detailed = detailed

    async def __call__(
        self, ctx: Any, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """Serve one listen stream: the acknowledgement, then the tasks' changes until they all ended."""
        subscription = ctx.request_id
        if subscription is None:
            raise MCPError(code=INVALID_REQUEST, message="subscriptions/listen needs a request id")
        meta = {SUBSCRIPTION_ID_META_KEY: subscription}
        tasks = await self._visible(ctx, (params.notifications.model_extra or {}).get("taskIds"))
        tools = params.notifications.tools_list_changed is True  # honoured: it never fires, the tools are fixed
        agreed: dict[str, Any] = {"taskIds": [task.id for task in tasks]} if tasks else {}
        if tools:
            agreed["toolsListChanged"] = True
        honored = types.SubscriptionFilter.model_validate(agreed)
        acknowledged = types.SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
        await ctx.session.send_notification(
            types.SubscriptionsAcknowledgedNotification(params=acknowledged), related_request_id=subscription
        )
        sent: dict[str, dict[str, Any]] = {}
        while tasks:
            changed = await self.calls.changes.next()  # taken before reading: a change made meanwhile is not missed
            going: list[ServedTask] = []
            for task in tasks:
                task, state = await self.calls.refresh(task)
                fields = self.detailed(task, state)
                if fields != sent.get(task.id):
                    sent[task.id] = fields
                    await ctx.session.send_notification(
                        TasksNotification(params={**fields, "_meta": meta}), related_request_id=subscription
                    )
                if not task.done():
                    going.append(task)
            tasks = going
            if tasks:
                interval = min(task.poll_interval_ms or self.calls.poll_interval_ms for task in tasks)
                await wait_for(changed, interval / 1000)
        if tools:  # a stream for tool list changes stays open until the client leaves
            await asyncio.Event().wait()
        return types.SubscriptionsListenResult(_meta=meta)

    async def _visible(self, ctx: Any, asked: object) -> list[ServedTask]:
        """The tasks of ``asked`` this request may see: none unless it declared the tasks extension."""
        if not isinstance(asked, list) or not self.declares_tasks(ctx):
            return []
        owner = self.owner(ctx)
        found: list[ServedTask] = []
        for task_id in dict.fromkeys(item for item in asked if isinstance(item, str)):
            task = await self.calls.tasks.get(task_id, owner=owner)
            if task is not None:
                found.append(task)
        return found
