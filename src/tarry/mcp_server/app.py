"""``serve``: tarry tools as an MCP server on the official SDK's low-level ``Server``.

2025-11-25 clients get task-augmented ``tools/call`` and ``tasks/get|result|list|cancel``
(served by a middleware, because the SDK has no tasks runtime and would sieve these results
as plain tool results); questions reach them as ``elicitation/create`` on the request that
waits (the call itself, or ``tasks/result`` with the related-task ``_meta``). 2026-07-28
clients get input requests (multi-round-trip requests) whose ``requestState`` is signed
(``tarry.mcp_server.request_state``) and bound to the call's stored chat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import mcp_types as types
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette

from tarry.agents import Agent
from tarry.chat import Chat
from tarry.errors import InvalidAnswerError, InvalidArgumentsError, TarryError
from tarry.mcp_server.calls import INTERNAL_ERROR, Approvals, CallState, ServedCalls, failure_error, served_tools
from tarry.mcp_server.listening import TaskListener
from tarry.mcp_server.request_state import RequestStateSigner
from tarry.mcp_server.resuming import SessionScopes, StorableIds, StoreEventStore
from tarry.mcp_server.served_tasks import ServedTask
from tarry.mcp_server.stream_events import StreamEvents
from tarry.questions import Question
from tarry.store import Store
from tarry.tools import Tool
from tarry.version import __version__

RELATED_TASK = "io.modelcontextprotocol/related-task"
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
MISSING_CAPABILITY = -32021
HEADER_MISMATCH = -32020
TASK_METHODS = ("tasks/get", "tasks/result", "tasks/list", "tasks/cancel")
MODERN_TASK_METHODS = ("tasks/get", "tasks/update", "tasks/cancel")
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
logger = logging.getLogger("tarry.mcp_server")
MAX_SESSIONS = 1000
"""How many sessions a server process keeps open at once by default."""
SESSION_IDLE_TIMEOUT = 1800.0
"""Seconds a session with no request in flight stays open by default (the SDK's default)."""
Owner = Callable[[Any], str | None]
"""Who a request acts for (the auth context a task is bound to), from the SDK's request context."""


def _iso(moment: Any) -> str:
    return str(moment.isoformat().replace("+00:00", "Z"))


def task_wire(task: ServedTask) -> dict[str, Any]:
    """A served task as a 2025-11-25 ``Task`` object (``ttl`` is required, ``null`` meaning unlimited)."""
    wire: dict[str, Any] = {
        "taskId": task.id,
        "status": task.status,
        "createdAt": _iso(task.created_at),
        "lastUpdatedAt": _iso(task.last_updated_at),
        "ttl": task.ttl_ms,
    }
    if task.status_message is not None:
        wire["statusMessage"] = task.status_message
    if task.poll_interval_ms is not None:
        wire["pollInterval"] = task.poll_interval_ms
    return wire


def elicitation_params(question: Question, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``elicitation/create`` params (wire form) that ask ``question``."""
    params: dict[str, Any]
    if question.kind == "url":
        params = {"mode": "url", "message": question.message, "url": question.url, "elicitationId": question.id}
    elif question.kind == "approval":
        params = {"mode": "form", "message": question.message, "requestedSchema": {"type": "object", "properties": {}}}
    else:
        params = {"mode": "form", "message": question.message, "requestedSchema": question.requested_schema}
    if meta:
        params["_meta"] = dict(meta)
    return params


def input_key(question: Question) -> str:
    """The key a question is asked under in an ``InputRequiredResult``: the key a tool gave it, else its id."""
    return question.key or question.id


def _tool_entry(tool: Tool, *, tasks: bool, required: bool) -> types.Tool:
    support = "required" if required else "optional"
    execution = types.ToolExecution(task_support=support) if tasks else None
    return types.Tool(
        name=tool.name, description=tool.description, input_schema=dict(tool.parameters), execution=execution
    )


def _header(ctx: Any, name: str) -> str | None:
    """A header of the HTTP request behind ``ctx`` (``None`` on stdio, or when it is absent)."""
    headers = getattr(ctx.request, "headers", None)
    value = headers.get(name) if headers is not None else None
    return value if isinstance(value, str) else None


def _declares_tasks(ctx: Any) -> bool:
    """Whether this request's client declared the SEP-2663 tasks extension."""
    capabilities = ctx.session.client_capabilities
    extensions = getattr(capabilities, "extensions", None) or {}
    return TASKS_EXTENSION in extensions


def _modern_fields(task: ServedTask) -> dict[str, Any]:
    """A served task's SEP-2663 fields; a tool result with ``isError`` is ``completed`` there (not ``failed``)."""
    status = "completed" if task.status == "failed" and task.result is not None else task.status
    fields: dict[str, Any] = {
        "taskId": task.id,
        "status": status,
        "createdAt": _iso(task.created_at),
        "lastUpdatedAt": _iso(task.last_updated_at),
        "ttlMs": task.ttl_ms,
    }
    if task.status_message is not None:
        fields["statusMessage"] = task.status_message
    if task.poll_interval_ms is not None:
        fields["pollIntervalMs"] = task.poll_interval_ms
    return fields


def detailed_task(task: ServedTask, state: CallState) -> dict[str, Any]:
    """A served task as SEP-2663's ``DetailedTask``: its input requests while it waits, its result once completed."""
    detailed = _modern_fields(task)
    if task.status == "input_required":
        detailed["inputRequests"] = {
            input_key(question): {"method": "elicitation/create", "params": elicitation_params(question)}
            for question in state.questions
        }
    if detailed["status"] == "completed":
        detailed["result"] = task.result
    elif detailed["status"] == "failed":
        detailed["error"] = state.error or failure_error(task.status_message)
    return detailed


def _modern_created(task: ServedTask) -> dict[str, Any]:
    return {"resultType": "task", **_modern_fields(task)}


def _require_elicitation(ctx: Any) -> None:
    """Refuse (``-32021``) to ask a client that did not declare elicitation: it could not answer."""
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        raise MCPError(
            code=MISSING_CAPABILITY,
            message="This tool call waits for a person's answer, and the client declared no elicitation capability",
            data={"requiredCapabilities": {"elicitation": {}}},
        )


def _refuse_untasked(tool: Tool, ctx: Any, *, modern: bool, required: bool) -> None:
    """Refuse a call of a tool the server runs only as a task (``required``) that the client did not make as one.

    2026-07-28 answers ``-32021`` naming the tasks extension (SEP-2663); 2025-11-25 answers
    ``-32601``, as its tools spec says for a ``taskSupport: "required"`` tool called without ``task``.
    """
    if not required:
        return
    if not modern:
        raise MCPError(code=METHOD_NOT_FOUND, message=f"Tool {tool.name!r} runs only as a task: call it with 'task'")
    if not _declares_tasks(ctx):
        raise MCPError(
            code=MISSING_CAPABILITY,
            message=f"Tool {tool.name!r} runs only as a task; the client did not declare the tasks extension",
            data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
        )


def _check_answer(question: Question, answer: Mapping[str, Any]) -> None:
    """Refuse (``INVALID_PARAMS``) an accepted form answer the question cannot take, naming what was wrong."""
    if answer.get("action") != "accept" or question.kind != "form":
        return
    content = answer.get("content")
    try:
        question.check_answer(content if isinstance(content, Mapping) else {})
    except InvalidAnswerError as error:
        refused = f"The answer to {question.message!r} was refused: {error}"
        raise MCPError(code=INVALID_PARAMS, message=refused) from error


def _becomes_task(state: CallState, *, ask_first: bool) -> bool:
    """Whether a call that the client lets be a task becomes one now: it waits, on work or on a question.

    A call of a tool served with ``ask_before_task`` (``ask_first``) asks its questions in the call
    itself (input requests) until its work is under way: it becomes a task only when it waits on
    something else.
    """
    if state.result is not None or state.error is not None:
        return False
    return not (ask_first and state.status == "input_required")


def _rpc_error(error: Mapping[str, Any]) -> MCPError:
    """The JSON-RPC error object ``error`` as the exception the SDK answers a request with."""
    return MCPError(code=error["code"], message=error["message"], data=error.get("data"))


def internal_error(error: BaseException) -> MCPError:
    """What a client learns of an error of the server's own (a database's, a bug): that there was one, and a
    reference to find it by in the server's log, where it is logged whole. Never its text: a database error
    names the SQL, its parameters and the claim's owner (host and process id)."""
    reference = secrets.token_hex(8)
    logger.error("An MCP request failed; the client was told reference %s", reference, exc_info=error)
    return MCPError(code=INTERNAL_ERROR, message=f"Internal error (reference {reference}); the server's log says more")


async def _without_internals(ctx: Any, call_next: Callable[[Any], Any]) -> Any:
    """Server middleware: an exception that is not a protocol error reaches the client as ``internal_error``.

    ``MCPError`` goes out as it is; so does pydantic's ``ValidationError``, which the SDK answers with
    ``-32602`` for params that do not fit the method.
    """
    try:
        return await call_next(ctx)
    except (MCPError, ValidationError):
        raise
    except Exception as error:
        raise internal_error(error) from None


def _no_task() -> MCPError:
    return MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found")


class _TarryMcpServer(Server[Any]):
    """The SDK's low-level server, advertising 2025-11-25 tasks on handshake connections."""

    list_tasks: bool = False

    def get_capabilities(
        self, *args: Any, protocol_version: str | None = None, **kwargs: Any
    ) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(*args, protocol_version=protocol_version, **kwargs)
        if protocol_version in MODERN_PROTOCOL_VERSIONS:
            return capabilities
        tasks = types.ServerTasksCapability(
            list=types.TasksListCapability() if self.list_tasks else None,
            cancel=types.TasksCancelCapability(),
            requests=types.ServerTasksRequestsCapability(
                tools=types.TasksToolsCapability(call=types.TasksCallCapability())
            ),
        )
        return capabilities.model_copy(update={"tasks": tasks})


def default_owner(ctx: Any) -> str | None:
    """The OAuth client the SDK's auth middleware verified for this request, else ``None``."""
    from mcp.server.auth.middleware.auth_context import get_access_token

    token = get_access_token()
    return None if token is None else f"oauth:{token.client_id}"


class McpFrontEnd:
    """The MCP methods of a tarry server, over [`ServedCalls`][tarry.mcp_server.ServedCalls]."""

    def __init__(
        self,
        calls: ServedCalls,
        signer: RequestStateSigner,
        owner: Owner,
        *,
        list_tasks: bool,
        stream_hold: float | None = None,
        task_required: frozenset[str] = frozenset(),
        ask_before_task: frozenset[str] = frozenset(),
    ) -> None:
        self.calls = calls
        self.signer = signer
        self.owner = owner
        self.list_tasks = list_tasks
        self.stream_hold = stream_hold
        self.task_required = task_required
        """The names of the tools served only as tasks."""
        self.ask_before_task = ask_before_task
        """The names of the tools whose calls ask their questions before they become tasks."""

    # tools/list and tools/call

    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        """``tools/list``: every served tool, with its task support for 2025-11-25 clients."""
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        entries = [
            _tool_entry(tool, tasks=not modern, required=tool.name in self.task_required)
            for tool in self.calls.tools.values()
        ]
        return types.ListToolsResult(tools=entries)

    def _tool(self, name: str) -> Tool:
        tool = self.calls.tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self.calls.tools)) or "none"
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool {name!r}; the tools are: {known}")
        return tool

    def _arguments(self, name: str, arguments: Mapping[str, Any] | None) -> tuple[Tool, dict[str, Any]]:
        tool = self._tool(name)
        arguments = dict(arguments or {})
        tool.validate(arguments)  # raises InvalidArgumentsError naming the problem
        return tool, arguments

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        """``tools/call``: a new call (its result, its input requests, or a task), or a 2026-07-28 call's next
        round carrying answers to its input requests under its signed ``requestState``."""
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        offered: Mapping[str, Any] = {}
        try:
            if modern and params.request_state is not None:
                chat_id = self.signer.open(params.request_state, tool=params.name, owner=self.owner(ctx))
                tool = self._tool(params.name)  # a server that no longer serves it says so
                # A refused answer fails this round only (-32602): the state stays valid, the call open for a retry.
                await self._take_responses(chat_id, params.input_responses or {})
                chat: Chat | str = chat_id
            else:
                tool, arguments = self._arguments(params.name, params.arguments)
                _refuse_untasked(tool, ctx, modern=modern, required=tool.name in self.task_required)
                chat = await self.calls.begin(params.name, arguments)
                chat_id = chat.id
                offered = params.input_responses or {}
        except InvalidArgumentsError as error:
            return types.CallToolResult(content=[types.TextContent(text=str(error))], is_error=True)
        try:
            ask_first = tool.name in self.ask_before_task
            if modern and _declares_tasks(ctx) and _becomes_task(await self.calls.state(chat), ask_first=ask_first):
                task = await self.calls.adopt(chat_id, params.name, owner=self.owner(ctx))
                return _modern_created(task)  # type: ignore[return-value]
            return await self._answer_call(ctx, chat_id, params.name, modern, offered)
        except Exception as error:  # the client is told the call failed: it must never run, nor be answered, later
            why = error.error.message if isinstance(error, MCPError) else "the server failed to serve the call"
            try:
                await self.calls.close_failed(chat_id, why)
            except Exception:  # the database that failed may fail this too: the error the client gets stands
                logger.exception("Could not close the call of chat %s after its failure", chat_id)
            raise

    async def _answer_call(
        self, ctx: Any, chat_id: str, name: str, modern: bool, offered: Mapping[str, Any]
    ) -> types.CallToolResult | types.InputRequiredResult:
        """Hold the request until the call ends or asks (a 2025-11-25 client is asked on the request meanwhile).

        ``offered`` are answers a 2026-07-28 client sent with its first call (SEP-2322): taken once, the rest ignored.
        """
        reported: list[str] = []
        held: float | None = asyncio.get_running_loop().time()
        while True:
            state = await self.calls.state(chat_id)
            if state.result is not None:
                return types.CallToolResult.model_validate(state.result)
            if state.error is not None:
                raise _rpc_error(state.error)
            if state.status_message is not None and state.status_message not in reported[-1:]:
                reported.append(state.status_message)  # progress goes out from the task's status_message
                await ctx.session.report_progress(len(reported), None, state.status_message)
            if state.status == "input_required":
                if modern and offered:
                    taken, offered = await self._take(state.questions, offered), {}
                    if taken:
                        self.calls.carry(chat_id)
                        continue
                if modern:
                    _require_elicitation(ctx)
                    return self._input_required(chat_id, name, state, self.owner(ctx))
                await self._elicit(ctx, state.questions, None)
            held = await self._let_go(ctx, held)
            self.calls.carry(chat_id)
            await asyncio.sleep(self.calls.poll_interval_ms / 1000)

    async def _let_go(self, ctx: Any, held: float | None) -> float | None:
        """Close the request's SSE stream once the call has held it ``stream_hold`` seconds (SEP-1699 polling).

        The client reconnects with ``Last-Event-ID`` after the priming event's ``retry`` and gets
        what was sent meanwhile from the event store; the SDK offers ``close_sse_stream`` only
        when there is one and the client can resume (2025-11-25 and later). Returns ``None`` once closed.
        """
        if held is None or self.stream_hold is None or ctx.close_sse_stream is None:
            return held
        if asyncio.get_running_loop().time() - held < self.stream_hold:
            return held
        await ctx.close_sse_stream()
        return None

    def _input_required(
        self, chat_id: str, tool: str, state: CallState, owner: str | None
    ) -> types.InputRequiredResult:
        requests = {
            input_key(question): {"method": "elicitation/create", "params": elicitation_params(question)}
            for question in state.questions
        }
        return types.InputRequiredResult.model_validate(
            {
                "inputRequests": requests,
                "requestState": self.signer.seal(chat_id, tool=tool, asking=list(requests), owner=owner),
            }
        )

    async def _take_responses(self, chat_id: str, responses: Mapping[str, Any]) -> None:
        state = await self.calls.state(chat_id)
        await self._take(state.questions, responses)

    async def _take(self, questions: Iterable[Question], responses: Mapping[str, Any]) -> int:
        """Record the client's answers to ``questions``, each under its input key; one without an answer stays open.

        Every answer is checked before any is recorded, so a refused answer records none of the round's.
        Returns how many were recorded; a response under a key no question has is ignored.
        """
        taken: list[tuple[Question, Mapping[str, Any]]] = []
        for question in questions:
            response: Any = responses.get(input_key(question))
            if isinstance(response, BaseModel):
                response = response.model_dump(by_alias=True, exclude_none=True)
            if isinstance(response, Mapping):  # no answer: asked again in the next round
                _check_answer(question, response)
                taken.append((question, response))
        for question, answer in taken:
            await self._record(question, answer)
        return len(taken)

    async def _record(self, question: Question, answer: Mapping[str, Any]) -> None:
        try:
            await self.calls.answer(question, str(answer.get("action")), answer.get("content"))
        except (ValueError, TarryError) as error:  # an invalid answer: the question stays open and is asked again
            raise MCPError(
                code=INVALID_PARAMS, message=f"The answer to {question.message!r} was refused: {error}"
            ) from error

    async def _elicit(self, ctx: Any, questions: Iterable[Question], task_id: str | None) -> None:
        _require_elicitation(ctx)
        meta = {RELATED_TASK: {"taskId": task_id}} if task_id is not None else None
        for question in questions:
            request = types.ElicitRequest.model_validate(
                {"method": "elicitation/create", "params": elicitation_params(question, meta)}
            )
            answer = await ctx.session.send_request(
                request, types.ElicitResult, metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
            )
            await self._record(question, answer.model_dump(by_alias=True, exclude_none=True))

    # 2025-11-25 tasks (a middleware: the SDK has no tasks runtime)

    async def middleware(self, ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        """Serve the task methods and task-augmented calls; anything else goes on to the SDK.

        A failure of the server's own reaches the client through ``_without_internals``, which runs first.
        """
        legacy = ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
        params = dict(ctx.params or {})
        if legacy and ctx.method == "tools/call" and params.get("task") is not None:
            return await self._start_task(ctx, params)
        if legacy and ctx.method in TASK_METHODS:
            return await self._task_method(ctx, ctx.method, params)
        if not legacy and ctx.method in MODERN_TASK_METHODS:
            return await self._modern_task_method(ctx, ctx.method, params)
        return await call_next(ctx)

    async def _modern_task_method(self, ctx: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """SEP-2663 ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` (2026-07-28)."""
        if not _declares_tasks(ctx):
            raise MCPError(
                code=MISSING_CAPABILITY,
                message=f"{method} needs the {TASKS_EXTENSION} extension declared in the request's client capabilities",
                data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
            )
        task_id = params.get("taskId")
        named = _header(ctx, "mcp-name")
        if named is not None and named != task_id:
            raise MCPError(code=HEADER_MISMATCH, message=f"The Mcp-Name header {named!r} does not match the taskId")
        task = await self.calls.tasks.get(task_id, owner=self.owner(ctx)) if isinstance(task_id, str) else None
        if task is None:
            raise _no_task()
        if method == "tasks/cancel":
            if not task.done():
                await self.calls.cancel(task)
            return {"resultType": "complete"}
        if method == "tasks/update":
            responses = params.get("inputResponses")
            if isinstance(responses, Mapping):
                _, state = await self.calls.refresh(task)
                await self._take(state.questions, responses)
            return {"resultType": "complete"}
        task, state = await self.calls.refresh(task)
        return {"resultType": "complete", **detailed_task(task, state)}

    async def _start_task(self, ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        task_params = params.get("task")
        ttl = task_params.get("ttl") if isinstance(task_params, Mapping) else None
        if not isinstance(name, str) or (ttl is not None and (not isinstance(ttl, int) or ttl < 0)):
            raise MCPError(code=INVALID_PARAMS, message="tools/call needs a tool name and a task ttl in milliseconds")
        try:
            _, arguments = self._arguments(name, params.get("arguments"))
        except InvalidArgumentsError as error:
            raise MCPError(code=INVALID_PARAMS, message=str(error)) from error
        task = await self.calls.start_task(name, arguments, ttl_ms=ttl, owner=self.owner(ctx))
        return {"task": task_wire(task)}

    async def _task_method(self, ctx: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
        owner = self.owner(ctx)
        if method == "tasks/list":
            if not self.list_tasks:
                raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=method)
            cursor = params.get("cursor")
            try:
                found = await self.calls.tasks.list(owner=owner, after=cursor, limit=101)
            except ValueError as error:
                raise MCPError(code=INVALID_PARAMS, message=f"Invalid cursor: {error}") from error
            page = found[:100]
            result: dict[str, Any] = {"tasks": [task_wire(task) for task in page]}
            if len(found) > 100:
                result["nextCursor"] = page[-1].id
            return result
        task_id = params.get("taskId")
        task = await self.calls.tasks.get(task_id, owner=owner) if isinstance(task_id, str) else None
        if task is None:
            raise _no_task()
        if method == "tasks/cancel":
            if task.done():
                raise MCPError(
                    code=INVALID_PARAMS, message=f"Cannot cancel task: already in terminal status '{task.status}'"
                )
            return task_wire(await self.calls.cancel(task))
        if method == "tasks/get":
            task, _ = await self.calls.refresh(task)
            return task_wire(task)
        return await self._task_result(ctx, task)

    async def _task_result(self, ctx: Any, task: ServedTask) -> dict[str, Any]:
        """``tasks/result``: wait until the task ends, asking the client what the call asks meanwhile."""
        while True:
            task, state = await self.calls.refresh(task)
            if task.done():
                break
            if task.status == "input_required":
                try:
                    await self._elicit(ctx, state.questions, task.id)
                except MCPError as error:  # the task's result is this error: its call never runs later
                    await self.calls.close_failed(task.chat_id, error.error.message)
                    await self.calls.refresh(task)
                    raise
                continue
            await asyncio.sleep((task.poll_interval_ms or self.calls.poll_interval_ms) / 1000)
        if task.result is None and task.status == "failed":
            raise _rpc_error(await self.calls.error(task))
        if task.result is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Task {task.id} was {task.status}: it has no result")
        meta = {**task.result.get("_meta", {}), RELATED_TASK: {"taskId": task.id}}
        return {**task.result, "_meta": meta}


def _tool_names(names: Iterable[str], option: str) -> frozenset[str]:
    if isinstance(names, str):  # one name given as a string would otherwise be its letters
        raise TypeError(f"{option} takes tool names (a list or a set), got the string {names!r}")
    return frozenset(names)


def build_server(
    tools_or_agent: Agent | Iterable[object],
    store: Store,
    *,
    name: str = "tarry",
    approvals: Approvals = "client",
    request_state_key: bytes | str | None = None,
    owner: Owner = default_owner,
    list_tasks: bool = False,
    ttl_ms: int | None = 3_600_000,
    max_ttl_ms: int | None = 86_400_000,
    poll_interval_ms: int = 500,
    stream_hold: float | None = None,
    carry_on: Callable[[str], object] | None = None,
    task_required: Iterable[str] = (),
    ask_before_task: Iterable[str] = (),
) -> tuple[Server[Any], ServedCalls]:
    """The SDK server that serves the tools, and the [`ServedCalls`][tarry.mcp_server.ServedCalls] behind it (see
    [`serve`][tarry.mcp_server.serve]); a name in ``task_required`` or ``ask_before_task`` that names none of the
    tools raises ``ValueError``."""
    tools = tools_or_agent.tools if isinstance(tools_or_agent, Agent) else list(tools_or_agent)
    only_tasks, ask_first = _tool_names(task_required, "task_required"), _tool_names(ask_before_task, "ask_before_task")
    served = served_tools(tools)
    unknown = sorted((only_tasks | ask_first) - set(served))
    if unknown:
        known = ", ".join(sorted(served)) or "none"
        raise ValueError(f"No tool served is named {', '.join(map(repr, unknown))}; the tools are: {known}")
    calls = ServedCalls(
        store,
        tools,
        name=name,
        approvals=approvals,
        ttl_ms=ttl_ms,
        max_ttl_ms=max_ttl_ms,
        poll_interval_ms=poll_interval_ms,
        carry_on=carry_on,
    )
    front = McpFrontEnd(
        calls,
        RequestStateSigner(request_state_key),
        owner,
        list_tasks=list_tasks,
        stream_hold=stream_hold,
        task_required=only_tasks,
        ask_before_task=ask_first,
    )
    listener = TaskListener(calls, owner, _declares_tasks, detailed_task)
    server = _TarryMcpServer(
        name,
        version=__version__,
        on_list_tools=front.list_tools,
        on_call_tool=front.call_tool,
        on_subscriptions_listen=listener,
    )
    server.list_tasks = list_tasks
    server.extensions[TASKS_EXTENSION] = {}
    server.middleware += [_without_internals, front.middleware]
    return server, calls


def serve(
    tools_or_agent: Agent | Iterable[object],
    store: Store,
    *,
    name: str = "tarry",
    approvals: Approvals = "client",
    request_state_key: bytes | str | None = None,
    path: str = "/mcp",
    allowed_hosts: Iterable[str] = ("127.0.0.1:*", "localhost:*", "[::1]:*"),
    allowed_origins: Iterable[str] = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"),
    owner: Owner = default_owner,
    list_tasks: bool = False,
    ttl_ms: int | None = 3_600_000,
    max_ttl_ms: int | None = 86_400_000,
    poll_interval_ms: int = 500,
    resumable: bool = True,
    retry_ms: int = 1000,
    stream_hold: float | None = None,
    auth: AuthSettings | None = None,
    token_verifier: TokenVerifier | None = None,
    carry_on: Callable[[str], object] | None = None,
    max_sessions: int | None = MAX_SESSIONS,
    session_idle_timeout: float | None = SESSION_IDLE_TIMEOUT,
    task_required: Iterable[str] = (),
    ask_before_task: Iterable[str] = (),
) -> Starlette:
    """tarry tools (a list, or an [`Agent`][tarry.Agent]'s) as an MCP server: a streamable HTTP ASGI app.

    Every call is a stored chat in ``store``, so any server process behind one load balancer,
    or ``tarry worker`` with the same tools, carries it on; a call that finishes at once
    answers at once. ``approvals`` is who approves a tool that ``requires_approval``:
    ``"client"`` (an elicitation) or ``"inbox"`` (a person in tarry's inbox on the server's
    side). ``request_state_key`` signs 2026-07-28 request state (HMAC-SHA256); give every
    process the same key (default: ``TARRY_MCP_STATE_KEY``, else a key of this process
    only). ``allowed_hosts``/``allowed_origins`` are the SDK's DNS-rebinding protection: the
    ``Host`` and ``Origin`` headers a request may carry. ``owner(ctx)`` names the auth
    context a task is bound to (default: the OAuth client the SDK verified); ``list_tasks``
    serves ``tasks/list`` (only sensible with an owner). Task times are milliseconds, as
    MCP has them. ``resumable`` keeps every SSE event in the store for an hour, so a
    client whose stream dropped resumes it with ``Last-Event-ID`` (reconnecting after
    ``retry_ms``); ``stream_hold`` is how many seconds a waiting call keeps its stream open
    before the server closes it and the client polls back (``None``: until it ends).
    ``auth`` and ``token_verifier`` put the server behind the SDK's OAuth resource-server
    checks (``AuthSettings``, a ``TokenVerifier``); tasks and request states are then bound
    to the verified client. ``carry_on(chat_id)`` hands calls to background workers
    (Celery's ``enqueue``, say) after their first step, instead of carrying them on in this process. At most
    ``max_sessions`` sessions are open at once (a client that would open one more gets 503
    while the open ones keep working), and a session with no request for
    ``session_idle_timeout`` seconds is closed (``None``: no limit, for either).
    ``task_required`` names the tools whose work is too long to hold a request open for: they are
    listed with ``taskSupport: "required"`` and a call of one that is not a task is refused.
    ``ask_before_task`` names the tools whose calls ask the questions they have before their work
    starts in the call itself (2026-07-28 input requests) and become tasks only once those are
    answered and they still run; by default a call that waits, on a question too, becomes a task
    at once when the client takes tasks. A name that is none of the tools' raises ``ValueError``. The app's
    lifespan runs the SDK's session manager: when you mount it,
    run its lifespan from yours.
    """
    server, calls = build_server(
        tools_or_agent,
        store,
        name=name,
        approvals=approvals,
        request_state_key=request_state_key,
        owner=owner,
        list_tasks=list_tasks,
        ttl_ms=ttl_ms,
        max_ttl_ms=max_ttl_ms,
        poll_interval_ms=poll_interval_ms,
        stream_hold=stream_hold,
        carry_on=carry_on,
        task_required=task_required,
        ask_before_task=ask_before_task,
    )
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(allowed_hosts),
        allowed_origins=list(allowed_origins),
    )
    app = server.streamable_http_app(
        streamable_http_path=path,
        transport_security=security,
        event_store=StoreEventStore(StreamEvents(store)) if resumable else None,
        retry_interval=retry_ms if resumable else None,
        auth=auth,
        token_verifier=token_verifier,
        max_sessions=max_sessions,
        session_idle_timeout=session_idle_timeout,
    )
    if resumable:
        app.add_middleware(SessionScopes)
        app.add_middleware(StorableIds)
    sessions = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app_: Starlette) -> AsyncIterator[None]:
        async with sessions(app_):
            try:
                yield
            finally:
                await calls.close()

    app.router.lifespan_context = lifespan
    app.state.calls = calls
    return app


async def serve_stdio(
    tools_or_agent: Agent | Iterable[object],
    store: Store,
    **options: Any,
) -> None:
    """Serve the tools over stdio (one client, this process's stdin and stdout) until the client leaves."""
    from mcp.server.stdio import stdio_server

    server, calls = build_server(tools_or_agent, store, **options)
    try:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
    finally:
        await calls.close()
