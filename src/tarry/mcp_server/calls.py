"""``ServedCalls``: running served tool calls as stored chats, and what their MCP tasks look like now.

Every ``tools/call`` becomes a stored chat of the agent [`ServedCalls.agent`][tarry.mcp_server.ServedCalls.agent] (the
tools plus ``CallModel``), so the call is claimed, leased,
paused and resumed exactly as a model's tool call is. This module knows nothing of the wire:
the MCP front end (``app.py``) asks it to start calls, read their state and record answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any, Literal

from tarry.agents import Agent
from tarry.calls import CallRecord
from tarry.chat import Chat
from tarry.clock import utcnow
from tarry.jobs.carry import continue_chat
from tarry.mcp.protocol_error import protocol_error_of
from tarry.mcp_server.call_model import CallModel, call_text
from tarry.mcp_server.served_tasks import ServedTask, ServedTasks, TaskTransitionError
from tarry.questions import Question
from tarry.store import Store
from tarry.store.changes import StoreChanges
from tarry.tools import Tool, tools_by_name

logger = logging.getLogger("tarry.mcp_server")
Approvals = Literal["client", "inbox"]
INBOX_WAIT = "Waiting for a person to approve the call in the inbox"
NOT_STARTED = "The call has not started yet"
INTERNAL_ERROR = -32603
CLOSE_GRACE = 2.0
"""Seconds [`ServedCalls.close`][tarry.mcp_server.ServedCalls.close] lets a step under way finish before it cancels
it."""
HANDED_KEPT = 10_000
"""How many chats a process remembers having handed to ``carry_on``."""
NEVER_STARTED = "The server process that took this call stopped before the call started; call the tool again"


@dataclass(frozen=True)
class CallState:
    """Where a served call stands: its status for MCP, the message to show, the questions for the client."""

    status: Literal["working", "input_required", "completed", "failed", "cancelled"]
    status_message: str | None
    questions: tuple[Question, ...] = ()
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    """The JSON-RPC error of a call that failed with one (a [`ProtocolError`][tarry.mcp.ProtocolError], say)."""


def _error_result(content: str) -> dict[str, Any] | None:
    """A call's result message read as one of tarry's error results (``{"error": ...}``), else ``None``."""
    with contextlib.suppress(ValueError):
        parsed = json.loads(content)
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), str):
            return parsed
    return None


def tool_result(content: str, *, is_error: bool) -> dict[str, Any]:
    """The ``CallToolResult`` (wire form) for a call's result message (``is_error``: one of tarry's error results)."""
    return {"content": [{"type": "text", "text": content}], "isError": is_error}


def failure_error(message: str | None) -> dict[str, Any]:
    """The JSON-RPC error (internal error) of a call that failed without one of its own."""
    return {"code": INTERNAL_ERROR, "message": message or "The call failed"}


def _log_failed_hand_on(chat_id: str, handing: asyncio.Future[object]) -> None:
    if not handing.cancelled() and handing.exception() is not None:
        logger.error(
            "Handing served call %s on failed; a worker's sweep takes it up", chat_id, exc_info=handing.exception()
        )


def served_agent(tools: Iterable[Tool], *, name: str = "tarry") -> Agent:
    """The agent whose chats are the calls an MCP server named ``name`` serves.

    Give it to ``tarry worker --agents`` (or the Celery app) so background workers carry the
    served calls on too: ``mcp_calls = served_agent(TOOLS)`` in a module, then
    ``tarry worker --agents module:mcp_calls``.
    """
    return Agent(f"mcp:{name}", model=CallModel(), tools=list(tools))


def served_tools(tools: Iterable[object]) -> dict[str, Tool]:
    """The tools a server serves, by name: tarry tools as they are, functions made tools (``@tool``).

    Raises ``TypeError`` for anything else, and ``ValueError`` when two have one name.
    """
    return tools_by_name(tools, where="an MCP server")


class ServedCalls:
    """The tools an MCP server serves, and the store their calls and tasks live in.

    ``approvals`` says who approves a tool that ``requires_approval``: ``"client"`` asks the
    MCP client (an elicitation), ``"inbox"`` leaves the question to tarry's inbox on the
    server's side. ``ttl_ms`` is a task's time to live when the client names none, and
    ``max_ttl_ms`` caps what it names (``None``: no cap). ``carry_on`` hands the calls to
    background workers instead of carrying them on in this process: after a call's first step
    (run here, so the call's task is answered at once) it is called once with the call's chat
    id, e.g. ``lambda chat_id: enqueue(celery_app, chat_id)``; decisions and cancellations then
    reach the workers as any chat's do (``enqueue_on_decisions``, or ``tarry worker``'s wakeups).
    """

    def __init__(
        self,
        store: Store,
        tools: Iterable[object],
        *,
        name: str = "tarry",
        approvals: Approvals = "client",
        ttl_ms: int | None = 3_600_000,
        max_ttl_ms: int | None = 86_400_000,
        poll_interval_ms: int = 500,
        carry_on: Callable[[str], object] | None = None,
    ) -> None:
        if approvals not in ("client", "inbox"):
            raise ValueError(f"approvals must be 'client' or 'inbox', got {approvals!r}")
        self.store = store
        self.tools = served_tools(tools)
        self.agent = served_agent(self.tools.values(), name=name)
        self.approvals = approvals
        self.ttl_ms = ttl_ms
        self.max_ttl_ms = max_ttl_ms
        self.poll_interval_ms = poll_interval_ms
        self.tasks = ServedTasks(store)
        self.changes = StoreChanges(store)
        self.carry_on = carry_on
        self._handed: set[str] = set()
        self._closing = False
        self._runners: dict[str, asyncio.Task[None]] = {}
        self._wakes: dict[str, asyncio.Event] = {}
        store.decision_hooks.append(self._woken)

    # Starting calls

    async def begin(self, tool: str, arguments: dict[str, Any]) -> Chat:
        """Record a new call as a stored chat and run it until it finishes or waits."""
        return await self.store.start_chat(call_text(tool, arguments), agent=self.agent)

    async def start_task(
        self, tool: str, arguments: dict[str, Any], *, ttl_ms: int | None, owner: str | None
    ) -> ServedTask:
        """Record a call that answers with a task: the task is durable before this returns; the call runs after."""
        chat = await self.store.create_chat(agent=self.agent)
        task = await self.tasks.create(
            chat.id, tool, ttl_ms=self.task_ttl(ttl_ms), poll_interval_ms=self.poll_interval_ms, owner=owner
        )
        self.carry(chat.id, call_text(tool, arguments), chat)
        return task

    async def adopt(self, chat_id: str, tool: str, *, owner: str | None) -> ServedTask:
        """Make a call that already runs (and now waits) a task the client polls; carry it on in this process."""
        task = await self.tasks.create(
            chat_id, tool, ttl_ms=self.task_ttl(None), poll_interval_ms=self.poll_interval_ms, owner=owner
        )
        self.carry(chat_id)
        refreshed, _ = await self.refresh(task)
        return refreshed

    def task_ttl(self, asked: int | None) -> int | None:
        """The time to live a task gets when the client asks for ``asked`` milliseconds."""
        ttl = self.ttl_ms if asked is None else asked
        if self.max_ttl_ms is not None and (ttl is None or ttl > self.max_ttl_ms):
            return self.max_ttl_ms
        return ttl

    # Carrying calls on in this process

    def carry(self, chat_id: str, first: str | None = None, chat: Chat | None = None) -> None:
        """Carry the chat on in the background of this process unless it already is (claims keep it to one process).

        With ``carry_on``, only a call's first step (``first``) runs here; the chat is handed on once.
        """
        if self.carry_on is not None and first is None:
            self._hand_on(chat_id)
            return
        running = self._runners.get(chat_id)
        if self._closing or (running is not None and not running.done()):
            return
        self._runners[chat_id] = asyncio.create_task(self._carry(chat_id, first, chat))

    async def _carry(self, chat_id: str, first: str | None, chat: Chat | None) -> None:
        wake = self._wakes.setdefault(chat_id, asyncio.Event())
        try:
            if first is not None and chat is not None:
                await chat.ask(first)
                if self.carry_on is not None:
                    self._hand_on(chat_id)
                    return
            while not self._closing:
                wake.clear()
                next_check = await continue_chat(self.store, chat_id, [self.agent])
                if next_check is None:
                    return
                delay = max(0.0, (next_check - utcnow()).total_seconds())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout=delay)
        except Exception:
            logger.exception("Carrying served call %s on failed; another process or a worker can take it over", chat_id)
        finally:
            self._wakes.pop(chat_id, None)
            self._runners.pop(chat_id, None)

    def _hand_on(self, chat_id: str) -> None:
        """Give the chat to ``carry_on`` once per process, in a thread (a broker call must not stall the loop)."""
        if chat_id in self._handed:
            return
        if len(self._handed) >= HANDED_KEPT:
            self._handed.clear()  # forgetting only means handing a chat on once more: claims keep it to one worker
        self._handed.add(chat_id)
        assert self.carry_on is not None
        handing = asyncio.get_running_loop().run_in_executor(None, self.carry_on, chat_id)
        handing.add_done_callback(partial(_log_failed_hand_on, chat_id))

    def _woken(self, question: Question) -> None:
        if question.chat_id is not None and question.chat_id in self._wakes:
            self._wakes[question.chat_id].set()

    async def close(self) -> None:
        """Stop carrying calls on in this process; their leases run out and another process takes over."""
        if self._woken in self.store.decision_hooks:
            self.store.decision_hooks.remove(self._woken)
        # A step under way finishes (its database work runs in a thread a cancel would not stop, and
        # the store may close next); one that outlasts CLOSE_GRACE is cancelled, its lease left to run out.
        self._closing = True
        for wake in self._wakes.values():
            wake.set()
        runners = list(self._runners.values())
        if runners:
            _, late = await asyncio.wait(runners, timeout=CLOSE_GRACE)
            for runner in late:
                runner.cancel()
            for runner in late:
                with contextlib.suppress(asyncio.CancelledError):
                    await runner
        await self.changes.close()

    # Reading and moving calls

    async def state(self, chat: Chat | str) -> CallState:
        """Where the chat's one call stands, from the store (any process wrote it)."""
        if isinstance(chat, str):
            chat = await self.store.load_chat(chat, CallModel(), self.agent.tools)
        record = next(iter(chat.records.values()), None)
        if record is None:
            return CallState("working", NOT_STARTED)
        if record.result is not None:
            failed = _error_result(record.result.content)
            error = None if failed is None else protocol_error_of(failed)
            if error is not None:  # the request failed: a JSON-RPC error, not a tool result
                return CallState("failed", error["message"], error=error)
            result = tool_result(record.result.content, is_error=failed is not None)
            if failed is not None:  # 2025-11-25: a tool result with isError ends its task as failed
                return CallState("failed", record.result.content, result=result)
            return CallState("completed", None, result=result)
        return self._open_state(record)

    def _open_state(self, record: CallRecord) -> CallState:
        waiting = record.pending_questions(utcnow())
        askable = tuple(q for q in waiting if q.kind != "approval" or self.approvals == "client")
        if askable:
            return CallState("input_required", askable[0].message, askable)
        if waiting:
            return CallState("working", INBOX_WAIT)
        message = record.task.status_message if record.task is not None else None
        return CallState("working", message)

    async def refresh(self, task: ServedTask) -> tuple[ServedTask, CallState]:
        """The task brought up to date with its call (one write when its status changed), and the call's state."""
        if task.done():
            error = await self.error(task) if task.status == "failed" and task.result is None else None
            return task, CallState(task.status, task.status_message, result=task.result, error=error)
        self.carry(task.chat_id)  # this process carries it on too (a no-op when it already does); claims keep it to one
        state = await self.state(task.chat_id)
        if state.status_message == NOT_STARTED and utcnow() - task.created_at > timedelta(seconds=self.store.lease):
            state = CallState("failed", NEVER_STARTED)  # its process died between the answer and the call's start
        if state.status == task.status and state.status_message == task.status_message:
            return task, state
        try:
            moved = await self.tasks.move(
                task.id, state.status, status_message=state.status_message, result=state.result
            )
        except TaskTransitionError:  # another process ended it first (a cancel, say): its word stands
            again = await self.tasks.get(task.id, owner=task.owner)
            if again is None:
                raise LookupError(f"Task {task.id} is gone") from None
            return again, CallState(again.status, again.status_message, result=again.result)
        return moved, state

    async def error(self, task: ServedTask) -> dict[str, Any]:
        """The JSON-RPC error a ``failed`` task without a tool result failed with (read from its call)."""
        state = await self.state(task.chat_id)
        return state.error or failure_error(task.status_message)

    async def cancel(self, task: ServedTask) -> ServedTask:
        """Mark the task cancelled (before answering) and ask whoever runs its call to cancel it (``Task.cancel()``)."""
        cancelled = await self.tasks.move(task.id, "cancelled", status_message="Cancelled by the client")
        await self.store.cancel(task.chat_id)
        self.carry(task.chat_id)
        return cancelled

    async def close_failed(self, chat_id: str, why: str) -> None:
        """Close a call whose failure the MCP client was told of (``why``): its questions are cancelled and it ends
        with a cancelled result, so nobody lists, answers or approves it later and it never runs.

        The chat's cancellation is asked for first, so a process that carries the call on meanwhile
        closes it too; this process closes it itself before it returns, trying again while a claim
        held elsewhere keeps it from doing so (up to the store's lease).
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + self.store.lease
        asked = False
        while True:
            chat = await self.store.load_chat(chat_id, CallModel(), self.agent.tools)
            if not chat.waiting:  # already over (a call that failed with a protocol error, say)
                return
            if not asked:
                logger.info("Closing served call %s: the MCP client was told it failed (%s)", chat_id, why)
                await self.store.cancel(chat_id)
                asked = True
            await chat.cancel()
            if not chat.waiting:
                return
            if loop.time() > end:
                logger.warning("Served call %s could not be closed yet; whoever carries it on closes it", chat_id)
                return
            await asyncio.sleep(self.poll_interval_ms / 1000)

    async def answer(self, question: Question, action: str, content: dict[str, Any] | None) -> bool:
        """Record the client's answer on ``question`` (channel ``mcp``): accept answers it, anything else declines."""
        if action == "accept":  # an approval as it stands, a URL question's visit (no values), a form's values
            answer = None if question.kind == "approval" else {} if question.kind == "url" else (content or {})
            return await self.store.decide(question.id, "accept", answer, channel="mcp") is not None
        note = "The MCP client declined." if action == "decline" else "The MCP client dismissed the question."
        return await self.store.decide(question.id, "decline", note=note, channel="mcp") is not None
