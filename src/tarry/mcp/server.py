"""``MCPServer``: one MCP server (stdio or streamable HTTP) as a source of tools for chats."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from functools import partial
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

import mcp_types as types
from mcp.client._probe import negotiate_auto  # what mcp.Client(mode="auto") runs; no public name in 2.3
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from tarry.live import LiveCall, current_call
from tarry.mcp import legacy_tasks, task_extension
from tarry.mcp.convert import elicit_response, question_for
from tarry.mcp.deadline import Deadline
from tarry.mcp.errors import ConnectionLost
from tarry.mcp.receiver import ReceiverDispatcher, TaskReceiver
from tarry.mcp.task import McpTask
from tarry.mcp.tool import McpTool

logger = logging.getLogger("tarry.mcp")
T = TypeVar("T")
LEGACY = "2025-11-25"
Protocol = Literal["auto", "legacy", "2026-07-28"]
ApprovalRule = bool | Collection[str] | Literal["unsafe"]


class _Connection:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ready: asyncio.Future[None] = loop.create_future()
        self.stop = asyncio.Event()
        self.session: ClientSession | None = None
        self.dispatcher: ReceiverDispatcher | None = None
        self.runner: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self.runner is not None and not self.runner.done() and not self.stop.is_set()


class MCPServer:
    """An MCP server whose tools a chat can call: ``Chat(tools=[MCPServer(command=[...])])``.

    Give ``command`` (a list: the program and its arguments, run over stdio, with ``env``
    added to a minimal environment and ``cwd``) or ``url`` (streamable HTTP, with
    ``headers``). The connection opens on first use, in the running event loop, and
    speaks 2026-07-28 when the server offers it, else 2025-11-25 (``protocol="auto"``;
    ``"legacy"`` or ``"2026-07-28"`` force one).

    ``requires_approval`` is ``True``/``False``, a collection of tool names, or
    ``"unsafe"``: every tool the server does not mark read-only or non-destructive.
    ``timeout`` bounds each request in seconds (the clock stops while a person answers a
    server's question); ``question_ttl`` is how long a person has to answer one;
    ``task_ttl`` is the time to live tarry asks for a 2025-11-25 task; ``max_rounds`` caps
    the rounds of input requests of one call. ``name`` is what questions show as their
    source (default: the server's own name).
    """

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        url: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        requires_approval: ApprovalRule = False,
        protocol: Protocol = "auto",
        timeout: float | None = 300.0,
        question_ttl: float | None = None,
        task_ttl: float | None = 3600.0,
        max_rounds: int = 10,
    ) -> None:
        if (command is None) == (url is None):
            raise ValueError("MCPServer takes command=[...] (stdio) or url=... (streamable HTTP), not both")
        if command is not None and (isinstance(command, str) or not command):
            raise TypeError("command must be a non-empty list: the program and its arguments")
        if protocol not in ("auto", "legacy", "2026-07-28"):
            raise ValueError(f"protocol must be 'auto', 'legacy' or '2026-07-28', got {protocol!r}")
        named = not isinstance(requires_approval, str) and isinstance(requires_approval, Collection)
        if not (isinstance(requires_approval, bool) or requires_approval == "unsafe" or named):
            raise TypeError("requires_approval is True, False, 'unsafe' or a collection of tool names")
        self.command = list(command) if command is not None else None
        self.url = url
        self.env = dict(env or {})
        self.cwd = cwd
        self.headers = dict(headers or {})
        self._name = name
        self.requires_approval = requires_approval
        self.protocol = protocol
        self.timeout = timeout
        self.question_ttl = question_ttl
        self.task_ttl = task_ttl
        self.max_rounds = max_rounds
        self._conn: _Connection | None = None
        self._connecting: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._exclusive: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._live: tuple[LiveCall, Deadline] | None = None

    # What the server is

    @property
    def name(self) -> str:
        """The server's name as questions show it: ``name=``, else the server's own, else its command or host."""
        if self._name:
            return self._name
        conn = self._conn
        if conn is not None and conn.session is not None and conn.session.server_info is not None:
            return conn.session.server_info.name
        if self.url is not None:
            return urlsplit(self.url).netloc or self.url
        assert self.command is not None
        words = [word for word in self.command[1:] if not word.startswith("-")] or self.command[:1]
        return os.path.basename(words[-1])

    @property
    def protocol_version(self) -> str | None:
        """The protocol version of the open connection, or ``None``."""
        conn = self._conn
        return None if conn is None or conn.session is None else conn.session.protocol_version

    @property
    def modern(self) -> bool:
        """True when the open connection speaks 2026-07-28 (or later)."""
        return self.protocol_version in MODERN_PROTOCOL_VERSIONS

    def approval_for(self, tool_name: str, annotations: Mapping[str, Any]) -> bool:
        """Whether calls of the tool need a person's approval, by ``requires_approval``."""
        rule = self.requires_approval
        if rule == "unsafe":
            return not (annotations.get("readOnlyHint") is True or annotations.get("destructiveHint") is False)
        if isinstance(rule, bool):
            return rule
        return tool_name in rule

    async def list_tools(self) -> list[McpTool]:
        """The server's tools (a :class:`~tarry.tools.ToolSource`)."""
        session = await self._session()
        tools: list[McpTool] = []
        cursor: str | None = None
        for _ in range(100):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            result = await self._run(partial(session.list_tools, params=params))
            tools.extend(
                McpTool(self, tool.model_dump(by_alias=True, mode="json", exclude_none=True)) for tool in result.tools
            )
            cursor = result.next_cursor
            if not cursor:
                break
        return tools

    # The connection

    async def connect(self) -> None:
        """Open the connection now (it opens on first use otherwise)."""
        await self._session()

    async def __aenter__(self) -> MCPServer:
        await self._session()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection (stopping a stdio server); the next use opens a new one."""
        conn, self._conn = self._conn, None
        if conn is None or conn.runner is None:
            return
        conn.stop.set()
        if conn.loop is asyncio.get_running_loop():
            await asyncio.gather(conn.runner, return_exceptions=True)

    async def _session(self) -> ClientSession:
        loop = asyncio.get_running_loop()
        conn = self._conn
        if conn is not None and conn.loop is loop and conn.alive and conn.session is not None:
            return conn.session
        lock = self._connecting.setdefault(loop, asyncio.Lock())
        async with lock:
            conn = self._conn
            if conn is None or conn.loop is not loop or not conn.alive:
                conn = _Connection(loop)
                conn.runner = loop.create_task(self._hold(conn))
                self._conn = conn
            await asyncio.shield(conn.ready)
            assert conn.session is not None
            return conn.session

    def _transport(self) -> AbstractAsyncContextManager[Any]:
        if self.url is not None:
            if self.headers:
                import httpx2

                client = httpx2.AsyncClient(headers=self.headers, timeout=httpx2.Timeout(30.0, read=None))
                return streamable_http_client(self.url, http_client=client)
            return streamable_http_client(self.url)
        assert self.command is not None
        parameters = StdioServerParameters(
            command=self.command[0], args=self.command[1:], env=self.env or None, cwd=self.cwd
        )
        return stdio_client(parameters)

    async def _hold(self, conn: _Connection) -> None:
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                dispatcher = ReceiverDispatcher(read, write, receiver=TaskReceiver(self._answer))
                session = ClientSession(
                    dispatcher=dispatcher,
                    elicitation_callback=self._on_elicit,
                    client_info=types.Implementation(name="tarry", version="0.1.0"),
                    extensions={task_extension.EXTENSION: {}},
                    result_claims=task_extension.claims(),
                )
                await stack.enter_async_context(session)
                await self._negotiate(session)
                conn.session, conn.dispatcher = session, dispatcher
                conn.ready.set_result(None)
                await conn.stop.wait()
        except BaseException as error:
            if not conn.ready.done():
                conn.ready.set_exception(
                    ConnectionError(
                        f"Could not connect to the MCP server {self.name!r}: {type(error).__name__}: {error}"
                    )
                )
            elif not isinstance(error, asyncio.CancelledError):
                logger.info("The connection to the MCP server %r ended: %s", self.name, type(error).__name__)
            if isinstance(error, asyncio.CancelledError):
                raise
        finally:
            conn.stop.set()

    async def _negotiate(self, session: ClientSession) -> None:
        """Agree on a protocol version: the SDK's own ``mode="auto"`` negotiation, or the forced one."""
        if self.protocol == "auto":
            await negotiate_auto(session)
        elif self.protocol == "legacy":
            await session.initialize()
        else:
            session.adopt(types.DiscoverResult.model_validate(await session.send_discover(self.protocol)))

    def _dropped(self) -> None:
        """Forget a connection that failed (the server closed it): the next use reconnects."""
        conn = self._conn
        if conn is not None:
            conn.stop.set()

    # Requests, with the time limit and the running call a pushed question belongs to

    async def _run(self, work: Callable[[], Awaitable[T]], *, pushes: bool = False) -> T:
        """Run one exchange with the server under ``timeout``.

        ``pushes``: on a 2025-11-25 connection the server may push questions during it;
        those exchanges run one at a time per server, so a pushed question belongs to the
        call that runs.
        """
        deadline = Deadline(self.timeout)
        if not pushes or self.modern:
            return await self._timed(deadline, work)
        loop = asyncio.get_running_loop()
        async with self._exclusive.setdefault(loop, asyncio.Lock()):
            live = current_call.get()
            self._live = None if live is None else (live, deadline)
            try:
                return await self._timed(deadline, work)
            finally:
                self._live = None

    async def _timed(self, deadline: Deadline, work: Callable[[], Awaitable[T]]) -> T:
        try:
            return await deadline.run(work())
        except MCPError as error:
            if self._lost(error):
                self._dropped()
                raise ConnectionLost(f"the connection to the MCP server {self.name!r} closed") from error
            raise

    def _lost(self, error: MCPError) -> bool:
        """Whether ``error`` says the connection closed, not that the server answered with an error.

        A server may answer with the code the SDK uses for a closed connection (-32000, the
        generic server error of JSON-RPC), so the code alone does not tell.
        """
        if error.code != types.CONNECTION_CLOSED:
            return False
        conn = self._conn
        dispatcher = None if conn is None else conn.dispatcher
        return dispatcher is None or dispatcher.closed or error.error.message == "Connection closed"

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        input_responses: dict[str, Any] | None = None,
        request_state: str | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult | types.Result:
        """One ``tools/call``: a result, input requests (2026-07-28), or a SEP-2663 task."""
        session = await self._session()
        responses: types.InputResponses | None = None
        if input_responses is not None:
            responses = {key: types.ElicitResult.model_validate(value) for key, value in input_responses.items()}
        return await self._run(
            lambda: session.call_tool(
                name, arguments, input_responses=responses, request_state=request_state,
                allow_input_required=True, allow_claimed=True,
            ),
            pushes=True,
        )  # fmt: skip

    async def call_tool_as_task(self, name: str, arguments: dict[str, Any]) -> types.CreateTaskResult:
        """A task-augmented ``tools/call`` (2025-11-25)."""
        session = await self._session()
        assert self._conn is not None
        assert self._conn.dispatcher is not None
        dispatcher = self._conn.dispatcher
        ttl = None if self.task_ttl is None else int(self.task_ttl * 1000)
        return await self._run(lambda: legacy_tasks.call_tool_as_task(session, dispatcher, name, arguments, ttl))

    def offers_legacy_tasks(self) -> bool:
        """True when the (2025-11-25) server takes task-augmented ``tools/call``."""
        conn = self._conn
        if self.modern or conn is None or conn.session is None:
            return False
        capabilities = conn.session.server_capabilities
        tasks = None if capabilities is None else capabilities.tasks
        requests = None if tasks is None else tasks.requests
        return requests is not None and requests.tools is not None and requests.tools.call is not None

    async def legacy_get(self, task_id: str) -> types.GetTaskResult:
        """``tasks/get`` (2025-11-25)."""
        session = await self._session()
        return await self._run(lambda: legacy_tasks.get_task(session, task_id))

    async def legacy_result(self, task_id: str) -> dict[str, Any]:
        """``tasks/result`` (2025-11-25): blocks until the task is terminal; questions may be pushed meanwhile."""
        session = await self._session()
        return await self._run(lambda: legacy_tasks.task_result(session, task_id), pushes=True)

    async def task_get(self, task_id: str) -> task_extension.DetailedTask:
        """``tasks/get`` (SEP-2663)."""
        session = await self._session()
        return await self._run(lambda: task_extension.get_task(session, task_id))

    async def task_update(self, task_id: str, responses: dict[str, Any]) -> None:
        """``tasks/update`` with input responses (SEP-2663)."""
        session = await self._session()
        await self._run(lambda: task_extension.update_task(session, task_id, responses))

    async def refresh_task(self, task: McpTask) -> None:
        """One ``tasks/get`` for ``task``; updates its status, message and poll interval."""
        from tarry.mcp.flow import apply_status

        if task.task_id is None:
            return
        if task.data.get("era") == LEGACY:
            apply_status(task, (await self.legacy_get(task.task_id)).model_dump(by_alias=True, mode="json"))
        else:
            apply_status(task, (await self.task_get(task.task_id)).model_dump(by_alias=True, mode="json"))

    async def cancel_task(self, task: McpTask) -> None:
        """``tasks/cancel`` for ``task``."""
        if task.task_id is None:
            return
        session = await self._session()
        task_id = task.task_id
        if task.data.get("era") == LEGACY:
            await self._run(lambda: legacy_tasks.cancel_task(session, task_id))
        else:
            await self._run(lambda: task_extension.cancel_task(session, task_id))

    # Questions the server pushes (2025-11-25)

    async def _on_elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        response = await self._answer(params.model_dump(by_alias=True, mode="json", exclude_none=True))
        return types.ElicitResult.model_validate(response)

    async def _answer(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Ask a person the pushed question through the running call, and give the server the decision."""
        bound = self._live
        if bound is None:
            logger.warning("The MCP server %r asked a question while no call of it runs; cancelled", self.name)
            return {"action": "cancel"}
        live, deadline = bound
        try:
            key = request.get("elicitationId")
            question = question_for(
                request, source=self.name, key=key if isinstance(key, str) else None, ttl=self.question_ttl
            )
        except ValueError as error:
            logger.warning("The MCP server %r asked a question tarry cannot show (%s); declined", self.name, error)
            return {"action": "decline"}
        deadline.pause()
        try:
            decided = await live.ask(question)
        finally:
            deadline.resume()
        return elicit_response(decided)

    def __repr__(self) -> str:
        where = self.url if self.url is not None else " ".join(self.command or [])
        return f"<MCPServer {self.name!r} {where}>"
