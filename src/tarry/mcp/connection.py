"""The transport to one MCP server: a connection per event loop, and every request tarry sends on it.

An ``MCPServer`` may be shared by threads that each run their own event loop (Celery's
``--pool threads``, sync verbs on ``asyncio.Runner``): each loop gets its own connection
(its own stdio subprocess or HTTP session), a question the server pushes belongs to the
call running on that connection, and ``close()`` stops every loop's connection from any
thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
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

from tarry.errors import ClaimLostError
from tarry.live import LiveCall, current_call
from tarry.mcp import legacy_tasks, task_extension
from tarry.mcp.convert import elicit_response, question_for
from tarry.mcp.deadline import Deadline
from tarry.mcp.errors import ConnectionLost
from tarry.mcp.receiver import ReceiverDispatcher, TaskReceiver

logger = logging.getLogger("tarry.mcp")
T = TypeVar("T")
Protocol = Literal["auto", "legacy", "2026-07-28"]


@dataclass
class Settings:
    """How to reach a server and how to talk to it (``MCPServer``'s arguments)."""

    command: list[str] | None
    url: str | None
    env: dict[str, str]
    cwd: str | os.PathLike[str] | None
    headers: dict[str, str]
    auth: Any
    """An ``httpx2.Auth`` for streamable HTTP (the SDK's ``OAuthClientProvider``), or ``None``."""
    name: str | None
    protocol: Protocol
    timeout: float | None
    question_ttl: float | None
    task_ttl: float | None
    max_rounds: int


@dataclass
class _Link:
    """One open connection, owned by one event loop."""

    loop: asyncio.AbstractEventLoop
    ready: asyncio.Future[None]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    connecting: asyncio.Lock = field(default_factory=asyncio.Lock)
    exclusive: asyncio.Lock = field(default_factory=asyncio.Lock)
    session: ClientSession | None = None
    dispatcher: ReceiverDispatcher | None = None
    runner: asyncio.Task[None] | None = None
    live: tuple[LiveCall, Deadline] | None = None
    """The call a question the server pushes on this connection belongs to."""

    @property
    def alive(self) -> bool:
        return self.runner is not None and not self.runner.done() and not self.stop.is_set()


class Connection:
    """The connections to one MCP server, one per event loop, and the requests sent on them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._links: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Link] = weakref.WeakKeyDictionary()
        self._guard = threading.Lock()
        self._last: _Link | None = None

    # What the server is

    @property
    def name(self) -> str:
        """The server's name: ``name=``, else the server's own, else its command or host."""
        settings = self.settings
        if settings.name:
            return settings.name
        link = self._current()
        if link is not None and link.session is not None and link.session.server_info is not None:
            return link.session.server_info.name
        if settings.url is not None:
            return urlsplit(settings.url).netloc or settings.url
        assert settings.command is not None
        words = [word for word in settings.command[1:] if not word.startswith("-")] or settings.command[:1]
        return os.path.basename(words[-1])

    @property
    def protocol_version(self) -> str | None:
        """The protocol version of this loop's open connection (else of the last one opened), or ``None``."""
        link = self._current()
        return None if link is None or link.session is None else link.session.protocol_version

    @property
    def modern(self) -> bool:
        """True when the connection speaks 2026-07-28 (or later)."""
        return self.protocol_version in MODERN_PROTOCOL_VERSIONS

    def _current(self) -> _Link | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self._last
        with self._guard:
            return self._links.get(loop) or self._last

    # Opening and closing

    async def session(self) -> ClientSession:
        """This event loop's session, opened on first use."""
        loop = asyncio.get_running_loop()
        link = self._link(loop)
        if link.alive and link.session is not None:
            return link.session
        async with link.connecting:
            link = self._link(loop)
            if link.runner is None or not link.alive:
                link = self._fresh(loop)
                link.runner = loop.create_task(self._hold(link))
            await asyncio.shield(link.ready)
            assert link.session is not None
            return link.session

    def _link(self, loop: asyncio.AbstractEventLoop) -> _Link:
        with self._guard:
            link = self._links.get(loop)
            if link is None:
                link = self._links[loop] = _Link(loop, loop.create_future())
            return link

    def _fresh(self, loop: asyncio.AbstractEventLoop) -> _Link:
        """A new link for ``loop`` in place of its ended one (keeping the lock the caller holds)."""
        with self._guard:
            old = self._links[loop]
            link = self._links[loop] = _Link(loop, loop.create_future(), connecting=old.connecting)
            return link

    async def close(self) -> None:
        """Close every loop's connection (stopping stdio servers); the next use opens a new one.

        Callable from any thread: another loop's connection is told to stop on its own loop.
        """
        loop = asyncio.get_running_loop()
        with self._guard:
            links = list(self._links.values())
            self._links.clear()
            self._last = None
        for link in links:
            if link.runner is None:
                continue
            if link.loop is loop:
                link.stop.set()
                await asyncio.gather(link.runner, return_exceptions=True)
            elif not link.loop.is_closed():
                link.loop.call_soon_threadsafe(link.stop.set)

    async def _transport(self, stack: AsyncExitStack) -> Any:
        """Open the transport in ``stack``; its read and write streams."""
        settings = self.settings
        if settings.url is not None:
            if settings.headers or settings.auth is not None:
                import httpx2

                timeout = httpx2.Timeout(30.0, read=None)
                client = httpx2.AsyncClient(headers=settings.headers, auth=settings.auth, timeout=timeout)
                await stack.enter_async_context(client)  # the transport closes only clients it made
                return await stack.enter_async_context(streamable_http_client(settings.url, http_client=client))
            return await stack.enter_async_context(streamable_http_client(settings.url))
        assert settings.command is not None
        parameters = StdioServerParameters(
            command=settings.command[0], args=settings.command[1:], env=settings.env or None, cwd=settings.cwd
        )
        return await stack.enter_async_context(stdio_client(parameters))

    async def _hold(self, link: _Link) -> None:
        try:
            async with AsyncExitStack() as stack:
                read, write = await self._transport(stack)
                answer = partial(self._answer, link)
                dispatcher = ReceiverDispatcher(read, write, receiver=TaskReceiver(answer))

                async def on_elicit(
                    context: ClientRequestContext, params: types.ElicitRequestParams
                ) -> types.ElicitResult | types.ErrorData:
                    try:
                        response = await answer(params.model_dump(by_alias=True, mode="json", exclude_none=True))
                    except MCPError as error:  # a question tarry cannot ask: the server learns why
                        return error.error
                    return types.ElicitResult.model_validate(response)

                session = ClientSession(
                    dispatcher=dispatcher,
                    elicitation_callback=on_elicit,
                    client_info=types.Implementation(name="tarry", version="0.1.0"),
                    **task_extension.session_options(),
                )
                await stack.enter_async_context(session)
                await self._negotiate(session)
                link.session, link.dispatcher = session, dispatcher
                with self._guard:
                    self._last = link
                link.ready.set_result(None)
                await link.stop.wait()
        except BaseException as error:
            if not link.ready.done():
                cause = _innermost(error)
                failed = ConnectionError(
                    f"Could not connect to the MCP server {self.name!r}: {type(cause).__name__}: {cause}"
                )
                failed.__cause__ = cause
                link.ready.set_exception(failed)
            elif not isinstance(error, asyncio.CancelledError):
                logger.info("The connection to the MCP server %r ended: %s", self.name, type(error).__name__)
            if isinstance(error, asyncio.CancelledError):
                raise
        finally:
            link.stop.set()

    async def _negotiate(self, session: ClientSession) -> None:
        """Agree on a protocol version: the SDK's own ``mode="auto"`` negotiation, or the forced one."""
        protocol = self.settings.protocol
        if protocol == "auto":
            await negotiate_auto(session)
        elif protocol == "legacy":
            await session.initialize()
        else:
            session.adopt(types.DiscoverResult.model_validate(await self._discover(session, protocol)))

    async def _discover(self, session: ClientSession, version: str) -> dict[str, Any]:
        """``server/discover`` at ``version``, sent again while it times out, for up to ``timeout`` seconds.

        The SDK gives it 10 seconds, less than a stdio server process may take to start on a busy machine.
        """
        loop = asyncio.get_running_loop()
        end = None if self.settings.timeout is None else loop.time() + self.settings.timeout
        while True:
            try:
                return await session.send_discover(version)
            except MCPError as error:
                if error.code != types.REQUEST_TIMEOUT or (end is not None and loop.time() >= end):
                    raise
                logger.info("The MCP server %r did not answer server/discover yet; asking again", self.name)

    # Requests, with the time limit and the running call a pushed question belongs to

    async def run(self, work: Callable[[ClientSession], Awaitable[T]], *, pushes: bool = False) -> T:
        """Run one exchange with the server on this loop's connection, under ``timeout``.

        ``pushes``: on a 2025-11-25 connection the server may push questions during it;
        those exchanges run one at a time per connection, so a pushed question belongs to
        the call that runs.
        """
        session = await self.session()
        link = self._link(asyncio.get_running_loop())
        deadline = Deadline(self.settings.timeout)
        if not pushes or self.modern:
            return await self._timed(link, deadline, work(session))
        async with link.exclusive:
            live = current_call.get()
            link.live = None if live is None else (live, deadline)
            try:
                return await self._timed(link, deadline, work(session))
            finally:
                link.live = None

    async def _timed(self, link: _Link, deadline: Deadline, work: Awaitable[T]) -> T:
        try:
            return await deadline.run(work)
        except MCPError as error:
            if _lost(link, error):
                link.stop.set()  # the next use reconnects
                raise ConnectionLost(f"the connection to the MCP server {self.name!r} closed") from error
            raise

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the server lists (wire form), page by page."""
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(100):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            result = await self.run(partial(_list_tools, params=params))
            tools.extend(tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in result.tools)
            cursor = result.next_cursor
            if not cursor:
                break
        return tools

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        input_responses: dict[str, Any] | None = None,
        request_state: str | None = None,
    ) -> types.CallToolResult | types.InputRequiredResult | types.Result:
        """One ``tools/call``: a result, input requests (2026-07-28), or a SEP-2663 task."""
        responses: types.InputResponses | None = None
        if input_responses is not None:
            responses = {key: types.ElicitResult.model_validate(value) for key, value in input_responses.items()}
        return await self.run(
            lambda session: session.call_tool(
                name, arguments, input_responses=responses, request_state=request_state,
                allow_input_required=True, allow_claimed=True,
            ),
            pushes=True,
        )  # fmt: skip

    async def call_tool_as_task(self, name: str, arguments: dict[str, Any]) -> types.CreateTaskResult:
        """A task-augmented ``tools/call`` (2025-11-25)."""
        await self.session()
        link = self._link(asyncio.get_running_loop())
        dispatcher = link.dispatcher
        assert dispatcher is not None
        task_ttl = self.settings.task_ttl
        ttl = None if task_ttl is None else int(task_ttl * 1000)
        return await self.run(
            lambda session: legacy_tasks.call_tool_as_task(session, dispatcher, name, arguments, ttl_ms=ttl)
        )

    def offers_legacy_tasks(self) -> bool:
        """True when the (2025-11-25) server takes task-augmented ``tools/call``."""
        link = self._current()
        if self.modern or link is None or link.session is None:
            return False
        capabilities = link.session.server_capabilities
        tasks = None if capabilities is None else capabilities.tasks
        requests = None if tasks is None else tasks.requests
        return requests is not None and requests.tools is not None and requests.tools.call is not None

    async def legacy_get(self, task_id: str) -> types.GetTaskResult:
        """``tasks/get`` (2025-11-25)."""
        return await self.run(lambda session: legacy_tasks.get_task(session, task_id))

    async def legacy_result(self, task_id: str) -> dict[str, Any]:
        """``tasks/result`` (2025-11-25): blocks until the task is terminal; questions may be pushed meanwhile."""
        return await self.run(lambda session: legacy_tasks.task_result(session, task_id), pushes=True)

    async def legacy_cancel(self, task_id: str) -> None:
        """``tasks/cancel`` (2025-11-25)."""
        await self.run(lambda session: legacy_tasks.cancel_task(session, task_id))

    async def task_get(self, task_id: str) -> task_extension.DetailedTask:
        """``tasks/get`` (SEP-2663)."""
        return await self.run(lambda session: task_extension.get_task(session, task_id))

    async def task_update(self, task_id: str, responses: dict[str, Any]) -> None:
        """``tasks/update`` with input responses (SEP-2663)."""
        await self.run(lambda session: task_extension.update_task(session, task_id, responses))

    async def task_cancel(self, task_id: str) -> None:
        """``tasks/cancel`` (SEP-2663)."""
        await self.run(lambda session: task_extension.cancel_task(session, task_id))

    # Questions the server pushes (2025-11-25)

    async def _answer(self, link: _Link, request: Mapping[str, Any]) -> dict[str, Any]:
        """Ask a person the pushed question through the call running on ``link``; the decision for the server.

        Raises ``MCPError`` (invalid params) for a question tarry cannot show, such as a field whose pattern it
        cannot check in linear time: the server gets an error saying why.
        """
        bound = link.live
        if bound is None:
            logger.warning("The MCP server %r asked a question while no call of it runs; cancelled", self.name)
            return {"action": "cancel"}
        live, deadline = bound
        try:
            key = request.get("elicitationId")
            question = question_for(
                request, source=self.name, key=key if isinstance(key, str) else None, ttl=self.settings.question_ttl
            )
        except ValueError as error:
            logger.warning("The MCP server %r asked a question tarry cannot show (%s); refused", self.name, error)
            raise MCPError(types.INVALID_PARAMS, f"tarry cannot ask this question: {error}") from None
        deadline.pause()
        try:
            decided = await live.ask(question)
        except ClaimLostError:
            logger.warning(
                "The call that the MCP server %r asked through is another process's now; cancelled", self.name
            )
            return {"action": "cancel"}
        finally:
            deadline.resume()
        return elicit_response(decided)


def _innermost(error: BaseException) -> BaseException:
    """The error a task group's exception group wraps (the first, at the deepest level), else ``error`` itself."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _lost(link: _Link, error: MCPError) -> bool:
    """Whether ``error`` says the connection closed, not that the server answered with an error.

    A server may answer with the code the SDK uses for a closed connection (-32000, the
    generic server error of JSON-RPC), so the code alone does not tell.
    """
    if error.code != types.CONNECTION_CLOSED:
        return False
    dispatcher = link.dispatcher
    return dispatcher is None or dispatcher.closed or error.error.message == "Connection closed"


async def _list_tools(session: ClientSession, *, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return await session.list_tools(params=params)
