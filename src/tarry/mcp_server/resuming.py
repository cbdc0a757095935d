"""Resumable SSE streams: the SDK's ``EventStore`` on tarry's store, each session's events its own.

The SDK's streamable HTTP transport gives each SSE event the id ``StoreEventStore.store_event``
returns and, when a client reconnects with ``Last-Event-ID``, replays the later events of that
stream. The SDK names a stream by the JSON-RPC id of its request, which every session reuses
("1", "2", ...), and tells the event store nothing of the session. So ``SessionScopes``
(an ASGI middleware) gives every session a random scope, set in a context variable for its
requests; the session's own tasks inherit it from its opening request. An event is stored
under its scope and replayed only to requests of that scope, so one session never replays
another's stream.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections import OrderedDict
from contextvars import ContextVar
from typing import Any

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import INVALID_REQUEST, JSONRPCMessage, jsonrpc_message_adapter
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tarry.mcp_server.stream_events import StreamEvents, stream_problem
from tarry.store.tables import MAX_STREAM

SESSION_HEADER = b"mcp-session-id"
UNKEPT = ""
"""The id of an event the store could not keep: an SSE event without an id, which no client resumes from."""
logger = logging.getLogger("tarry.mcp_server")
_scope: ContextVar[str | None] = ContextVar("tarry_mcp_event_scope", default=None)


class SessionScopes:
    """ASGI middleware: sets the event scope of the session each HTTP request belongs to.

    A request that opens a session gets a new random scope, remembered under the session id
    the response names; later requests of that session find it by their ``Mcp-Session-Id``.
    ``limit`` bounds how many sessions are remembered (the oldest are forgotten first).
    """

    def __init__(self, app: ASGIApp, *, limit: int = 10_000) -> None:
        self.app = app
        self.limit = limit
        self._sessions: OrderedDict[str, str] = OrderedDict()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        session = dict(scope.get("headers") or []).get(SESSION_HEADER)
        if session is not None:
            named = session.decode("latin-1")
            token = _scope.set(self._sessions.get(named, named))  # a forgotten session shares no one's scope
            try:
                await self.app(scope, receive, send)
            finally:
                _scope.reset(token)
            return
        fresh = secrets.token_urlsafe(24)

        async def remember(message: Message) -> None:
            if message["type"] == "http.response.start":
                opened = dict(message.get("headers") or []).get(SESSION_HEADER)
                if opened is not None:
                    self._sessions[opened.decode("latin-1")] = fresh
                    while len(self._sessions) > self.limit:
                        self._sessions.popitem(last=False)
            await send(message)

        token = _scope.set(fresh)
        try:
            await self.app(scope, receive, remember)
        finally:
            _scope.reset(token)


class StorableIds:
    """ASGI middleware: refuses a POST whose JSON-RPC request id cannot name a stream of the event store.

    The SDK names a response's SSE stream by its request's id and stores the stream's first event
    before the request reaches a handler, so a store that cannot keep the id (over 200 characters,
    NUL on PostgreSQL) failed the request with HTTP 500. Such a request gets a JSON-RPC error
    instead (``-32600``, HTTP 400) that says what is wrong with the id. The body goes on to the app
    as it came; one larger than ``INSPECTED`` is passed on unread (the SDK refuses it itself).
    """

    INSPECTED = 1_000_000
    """The largest body (bytes) whose ids are checked."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        read: list[Message] = []
        size, done = 0, False
        while not done and size <= self.INSPECTED:
            message = await receive()
            read.append(message)
            size += len(message.get("body", b""))
            done = message["type"] != "http.request" or not message.get("more_body", False)
        problem = _id_problem(b"".join(message.get("body", b"") for message in read)) if done else None
        if problem is not None:
            body = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": problem}}
            await JSONResponse(body, status_code=400)(scope, receive, send)
            return

        async def replayed() -> Message:
            return read.pop(0) if read else await receive()

        await self.app(scope, replayed, send)


def _id_problem(body: bytes) -> str | None:
    """What is wrong with the id of a request in ``body`` (a JSON-RPC message or batch), if anything."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None  # the SDK answers a parse error itself
    for message in parsed if isinstance(parsed, list) else [parsed]:
        request_id = message.get("id") if isinstance(message, dict) else None
        if not isinstance(request_id, str):
            continue
        problem = stream_problem(request_id)
        if problem is not None:
            return (
                f"Invalid request: the id {request_id[:40]!r} {problem}: use an id of at most {MAX_STREAM} characters, "
                "without NUL characters or lone surrogates"
            )
    return None


class StoreEventStore(EventStore):
    """The SDK's ``EventStore`` on the store ([`StreamEvents`][tarry.mcp_server.StreamEvents]), scoped per session."""

    def __init__(self, events: StreamEvents) -> None:
        self.events = events

    @staticmethod
    def _current() -> str:
        scope = _scope.get()
        if scope is None:
            raise RuntimeError("StoreEventStore needs SessionScopes around the app that uses it")
        return scope

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        """Keep the event; its id is what the client sends back as ``Last-Event-ID``.

        A write that fails gives the empty id: the event goes out without one, so the client gets
        it (an answer, or the error that answers a failed call) but cannot resume from it. Raising
        would end the SDK's message router of the session, and every later answer with it.
        """
        wire: dict[str, Any] | None = None
        if message is not None:
            wire = message.model_dump(mode="json", by_alias=True, exclude_unset=True)
        scope = self._current()
        try:
            return await self.events.add(scope, str(stream_id), wire)
        except Exception:
            logger.warning("Keeping an event of stream %s failed; it is sent unkept", stream_id, exc_info=True)
            return UNKEPT

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        """Send the events after ``last_event_id`` on its stream; ``None`` when it is not this session's."""
        found = await self.events.after(self._current(), last_event_id)
        if found is None:
            return None
        stream, later = found
        for event in later:
            if event.message is not None:
                await send_callback(EventMessage(jsonrpc_message_adapter.validate_python(event.message), event.id))
        return stream
