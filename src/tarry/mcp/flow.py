"""The protocol steps of an MCP tool call: call, retry with answers, poll, resume, refresh and cancel.

A call ends in a result, input requests and retries, URL questions then a retry (-32042),
or a server's task polled to its end. The requests go through ``tarry.mcp.connection``
(the transport); ``Steps`` is what an [`McpTask`][tarry.mcp.McpTask] refreshes and cancels with.

Every fault (a crashed server, a malformed result, a forgotten task, a rejected request
state, no answer in time) ends the call with an ``{"error": ...}`` result that says what
happened; request state and other protocol state never reach the logs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

import mcp_types as types
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from pydantic import ValidationError

from tarry.clock import utcnow
from tarry.mcp.connection import Connection
from tarry.mcp.convert import elicit_response, error_text, question_for, result_value
from tarry.mcp.errors import ConnectionLost
from tarry.mcp.oauth import LOGIN_KEY, LoginRequired, watch_logins
from tarry.mcp.task import McpTask
from tarry.mcp.task_extension import TaskCreated
from tarry.questions import Question


class Target(Protocol):
    """The tool a call goes to, as the steps see it (an ``McpTool``)."""

    name: str
    remote_name: str
    task_support: str


logger = logging.getLogger("tarry.mcp")
LEGACY = "2025-11-25"


class _Malformed(Exception):
    """The server sent something tarry cannot read."""


class _Unaskable(Exception):
    """The server asked a question tarry cannot put to a person (a pattern it cannot check in linear time)."""


async def start(conn: Connection, tool: Target, arguments: dict[str, Any]) -> Any:
    """Call the tool: its result, or an [`McpTask`][tarry.mcp.McpTask] when the call waits."""

    async def go() -> Any:
        await conn.session()
        if tool.task_support != "forbidden" and conn.offers_legacy_tasks():
            created = await conn.call_tool_as_task(tool.remote_name, arguments)
            wire = created.task.model_dump(by_alias=True, mode="json")
            return _new_task(conn, tool, LEGACY, wire)
        return await _call(conn, tool, arguments, 1)

    return await _guard(conn, tool, go)


async def _call(conn: Connection, tool: Target, arguments: dict[str, Any], round_: int) -> Any:
    """One ``tools/call`` and what follows; a URL-elicitation-required error (-32042) asks the person first."""
    try:
        outcome = await conn.call_tool(tool.remote_name, arguments)
    except MCPError as error:
        if error.code != types.URL_ELICITATION_REQUIRED:
            raise
        return _consent(conn, tool, error, round_)
    return await _settle(conn, tool, arguments, outcome, round_)


def _consent(conn: Connection, tool: Target, error: MCPError, round_: int) -> Any:
    """The task of a call the server refused until the person visits URLs: a URL question each."""
    if round_ > conn.settings.max_rounds:
        rounds = conn.settings.max_rounds
        return {
            "error": f"The MCP server {conn.name!r} asked for URLs more than {rounds} times in the {tool.name} call."
        }
    elicitations = UrlElicitationRequiredError.from_error(error.error).elicitations
    if not elicitations:
        raise _Malformed("a URL-elicitation-required error without elicitations")
    questions = [
        question_for(
            {**elicitation.model_dump(by_alias=True, mode="json", exclude_none=True), "mode": "url"},
            source=conn.name, key=elicitation.elicitation_id, ttl=conn.settings.question_ttl,
        )
        for elicitation in elicitations
    ]  # fmt: skip
    data = {"kind": "consent", "era": conn.protocol_version, "server": conn.name, "tool": tool.remote_name,
            "round": round_}  # fmt: skip
    task = McpTask(status="input_required", data=data)
    task.steps = Steps(conn)
    return task.with_question(*questions)


async def _after_consent(conn: Connection, tool: Target, task: McpTask, arguments: dict[str, Any]) -> Any:
    """Retry the call once the person opened every URL; a declined URL ends the call."""
    if any(question.is_open(utcnow()) for question in task.questions):
        return task
    if all(question.decision == "accept" for question in task.questions):
        return await _call(conn, tool, arguments, int(task.data.get("round", 1)) + 1)
    where = f"The MCP server {conn.name!r}"
    return {"error": f"{where} needs a URL visited before the {tool.name} call, and the person did not visit it."}


async def carry_on(conn: Connection, tool: Target, task: McpTask, arguments: dict[str, Any]) -> Any:
    """Carry a waiting call on, once: retry with the answers, or check on the server's task."""

    async def go() -> Any:
        if task.kind == "input":
            return await _retry(conn, tool, task, arguments)
        if task.kind == "consent":
            return await _after_consent(conn, tool, task, arguments)
        if task.kind == "task" and not _has_news(task) and not due(task, utcnow()):
            return task  # checked less than poll_interval ago (in any process): no tasks/get yet
        if task.kind == "task" and task.data.get("era") == LEGACY:
            return await _legacy_task(conn, task)
        if task.kind == "task":
            return await _modern_task(conn, task)
        raise _Malformed(f"a saved task of unknown kind {task.kind!r}")

    return await _guard(conn, tool, go, task)


async def _guard(conn: Connection, tool: Target, go: Callable[[], Awaitable[Any]], task: McpTask | None = None) -> Any:
    """Run ``go``; what went wrong becomes an error result, and a login it needed becomes a URL question."""
    with watch_logins() as logins:
        outcome = await _guarded(conn, tool, go, task)
    if logins and isinstance(outcome, dict) and "error" in outcome:
        return _login(conn, tool, logins[-1], int(task.data.get("round", 0)) + 1 if task is not None else 1)
    return outcome


def _login(conn: Connection, tool: Target, login: LoginRequired, round_: int) -> Any:
    """The task of a call that waits for a person to log in to the server (a URL question, like -32042's)."""
    if round_ > conn.settings.max_rounds:
        rounds = conn.settings.max_rounds
        where = f"The MCP server {conn.name!r}"
        return {"error": f"{where} asked for a login more than {rounds} times in the {tool.name} call."}
    message = f"Log in to {conn.name} so that the {tool.name} call can go on."
    question = question_for(
        {"mode": "url", "message": message, "url": login.url}, source=conn.name, key=LOGIN_KEY + login.state,
        ttl=login.ttl,
    )  # fmt: skip
    data = {"kind": "consent", "era": conn.protocol_version, "server": conn.name, "tool": tool.remote_name,
            "round": round_, "login": True}  # fmt: skip
    task = McpTask(status="input_required", data=data)
    task.steps = Steps(conn)
    return task.with_question(question)


async def _guarded(conn: Connection, tool: Target, go: Callable[[], Awaitable[Any]], task: McpTask | None) -> Any:
    where = f"the MCP server {conn.name!r}"
    try:
        return await go()
    except TimeoutError:
        return {"error": f"{where} did not answer the {tool.name} call within {conn.settings.timeout:g} seconds."}
    except ConnectionLost:
        logger.info("The connection to %s closed during the %s call", where, tool.name)
        return {"error": f"The connection to {where} closed during the {tool.name} call (the server may have crashed)."}
    except MCPError as error:
        if task is not None and task.kind == "task" and error.code == types.INVALID_PARAMS:
            text = (
                f"{where} no longer knows the task of the {tool.name} call "
                f"(it expired or was forgotten): {error.message}"
            )
        elif task is not None and task.kind == "input":
            text = f"{where} rejected the answers to the {tool.name} call: {error.message}"
        else:
            text = f"{where} answered the {tool.name} call with an error: {error.message}"
        logger.info("The %s call to %s failed: MCP error %s", tool.name, where, error.code)
        return {"error": text}
    except _Unaskable as error:
        logger.warning("%s asked a question in the %s call that tarry cannot show (%s)", where, tool.name, error)
        return {"error": f"{where} asked a question in the {tool.name} call that tarry cannot ask: {error}"}
    except (ValidationError, _Malformed, ValueError, KeyError, TypeError) as error:
        logger.info("The %s call to %s got a malformed result (%s)", tool.name, where, type(error).__name__)
        return {"error": f"{where} sent a malformed result for the {tool.name} call."}
    except ConnectionError as error:
        return {"error": str(error)}


async def _settle(conn: Connection, tool: Target, arguments: dict[str, Any], outcome: Any, round_: int) -> Any:
    while True:
        if isinstance(outcome, types.CallToolResult):
            return result_value(outcome.model_dump(by_alias=True, mode="json", exclude_none=True))
        if isinstance(outcome, TaskCreated):
            return _new_task(conn, tool, conn.protocol_version or "", outcome.model_dump(by_alias=True, mode="json"))
        if not isinstance(outcome, types.InputRequiredResult):
            raise _Malformed(f"an unexpected result {type(outcome).__name__}")
        if round_ > conn.settings.max_rounds:
            rounds = conn.settings.max_rounds
            text = f"The MCP server {conn.name!r} asked for input more than {rounds} times in the {tool.name} call."
            return {"error": text}
        requests = outcome.input_requests or {}
        if requests:
            questions = [_question(conn, key, request) for key, request in requests.items()]
            data = {
                "kind": "input", "era": conn.protocol_version, "server": conn.name, "tool": tool.remote_name,
                "request_state": outcome.request_state, "round": round_,
            }  # fmt: skip
            task = McpTask(status="input_required", data=data)
            task.steps = Steps(conn)
            return task.with_question(*questions)
        outcome = await conn.call_tool(tool.remote_name, arguments, request_state=outcome.request_state)
        round_ += 1


def _question(conn: Connection, key: str, request: Any) -> Question:
    if not isinstance(request, types.ElicitRequest):
        raise _Malformed(f"an input request tarry does not serve ({getattr(request, 'method', '?')})")
    wire = request.params.model_dump(by_alias=True, mode="json", exclude_none=True)
    try:
        return question_for(wire, source=conn.name, key=key, ttl=conn.settings.question_ttl)
    except ValueError as error:
        raise _Unaskable(str(error)) from None


async def _retry(conn: Connection, tool: Target, task: McpTask, arguments: dict[str, Any]) -> Any:
    responses = {question.key: elicit_response(question) for question in task.questions if question.key is not None}
    state = task.data.get("request_state")
    if state is not None and not isinstance(state, str):
        raise _Malformed("saved request state is not text")
    outcome = await conn.call_tool(tool.remote_name, arguments, input_responses=responses, request_state=state)
    return await _settle(conn, tool, arguments, outcome, int(task.data.get("round", 1)) + 1)


def _new_task(conn: Connection, tool: Target, era: str, wire: Mapping[str, Any]) -> McpTask:
    task_id = wire.get("taskId")
    if not isinstance(task_id, str) or not task_id:
        raise _Malformed("a task without an id")
    ttl = wire.get("ttl", wire.get("ttlMs"))
    data = {
        "kind": "task", "era": era, "server": conn.name, "tool": tool.remote_name, "task_id": task_id,
        "created_at": wire.get("createdAt"), "ttl_ms": ttl, "asked": [], "answered": [],
    }  # fmt: skip
    task = McpTask(status="working", data={key: value for key, value in data.items() if value is not None})
    task.steps = Steps(conn)
    apply_status(task, wire)
    if task.done() or task.input_required():
        task.status = "working"  # carried on (result or questions) at the next resume, at once
        task.data.pop("checked_at", None)
    return task


def due(task: McpTask, now: datetime) -> bool:
    """Whether the server's task may be checked again: ``poll_interval`` passed since the last check.

    The last check (``data["checked_at"]``, ISO 8601 UTC) is saved with the task, so the
    interval holds across processes; a task without either is always due.
    """
    checked = task.data.get("checked_at")
    if task.poll_interval is None or not isinstance(checked, str):
        return True
    try:
        last = datetime.fromisoformat(checked)
    except ValueError:
        return True
    return last.tzinfo is None or now >= last + timedelta(seconds=task.poll_interval)


def _has_news(task: McpTask) -> bool:
    """True when a SEP-2663 task has answers the server has not been sent yet (they go at once)."""
    answered = task.data.get("answered", [])
    return any(
        question.key is not None and question.key not in answered and question.decision is not None
        for question in task.questions
    )


def apply_status(task: McpTask, wire: Mapping[str, Any]) -> None:
    """Take a task's status, message and poll interval (ms to seconds) from a protocol task object.

    Also records when the task was checked (``data["checked_at"]``), for ``due``.
    """
    task.data = {**task.data, "checked_at": utcnow().isoformat()}
    status = wire.get("status")
    if status not in McpTask.STATUSES:
        raise _Malformed(f"a task status {status!r}")
    task.status = str(status)
    message = wire.get("statusMessage")
    task.status_message = message if isinstance(message, str) else None
    poll = wire.get("pollInterval", wire.get("pollIntervalMs"))
    task.poll_interval = (
        poll / 1000 if isinstance(poll, int | float) and not isinstance(poll, bool) and poll >= 0 else None
    )


async def _legacy_task(conn: Connection, task: McpTask) -> Any:
    assert task.task_id is not None
    apply_status(task, (await conn.legacy_get(task.task_id)).model_dump(by_alias=True, mode="json"))
    if task.status == "working":
        return task
    if task.status == "cancelled":
        return task
    payload = await conn.legacy_result(task.task_id)  # blocks; pushed questions are asked meanwhile
    if payload.get("isError"):
        task.status, task.status_message = "failed", error_text(payload)
        return task
    return result_value(payload)


async def _modern_task(conn: Connection, task: McpTask) -> Any:
    assert task.task_id is not None
    await _send_answers(conn, task)
    detailed = (await conn.task_get(task.task_id)).model_dump(by_alias=True, mode="json")
    apply_status(task, detailed)
    if task.status == "completed":
        result = detailed.get("result")
        if not isinstance(result, Mapping):
            raise _Malformed("a completed task without a result")
        return result_value(result)
    if task.status == "failed":
        error = detailed.get("error")
        task.status_message = str(error.get("message")) if isinstance(error, Mapping) else task.status_message
        return task
    return task.with_question(*_new_questions(conn, task, detailed))


async def _send_answers(conn: Connection, task: McpTask) -> None:
    """Send the server the answers to its questions it has not had yet (a lapsed question's too); note them sent."""
    assert task.task_id is not None
    answered = list(task.data.get("answered", []))
    now = utcnow()
    responses = {
        question.key: elicit_response(question)
        for question in task.questions
        if question.key is not None
        and question.key not in answered
        and (question.decision is not None or question.expired(now))
    }
    if responses:
        await conn.task_update(task.task_id, responses)
        task.data = {**task.data, "answered": [*answered, *responses]}


def _new_questions(conn: Connection, task: McpTask, detailed: Mapping[str, Any]) -> list[Question]:
    """The questions of a task waiting for input that were not asked before; notes them asked."""
    if task.status != "input_required":
        return []
    asked = list(task.data.get("asked", []))
    fresh: list[Question] = []
    for key, request in (detailed.get("inputRequests") or {}).items():
        if key in asked:
            continue
        parsed = types.ElicitRequest.model_validate(request) if isinstance(request, Mapping) else request
        fresh.append(_question(conn, key, parsed))
        asked.append(key)
    task.data = {**task.data, "asked": asked}
    return fresh


class Steps:
    """The steps an [`McpTask`][tarry.mcp.McpTask] takes on its own (``refresh()``, ``cancel()``), on one server's
    connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def refresh(self, task: McpTask) -> None:
        """One ``tasks/get`` for a server's task; updates its status, message and poll interval."""
        if task.task_id is None:
            return
        if task.data.get("era") == LEGACY:
            wire = (await self.conn.legacy_get(task.task_id)).model_dump(by_alias=True, mode="json")
        else:
            wire = (await self.conn.task_get(task.task_id)).model_dump(by_alias=True, mode="json")
        apply_status(task, wire)

    async def cancel(self, task: McpTask) -> None:
        """``tasks/cancel`` for a server's task."""
        if task.task_id is None:
            return
        if task.data.get("era") == LEGACY:
            await self.conn.legacy_cancel(task.task_id)
        else:
            await self.conn.task_cancel(task.task_id)
