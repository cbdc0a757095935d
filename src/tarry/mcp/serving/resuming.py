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

import secrets
from collections import OrderedDict
from contextvars import ContextVar
from typing import Any

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage, jsonrpc_message_adapter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tarry.store import StreamEvents

SESSION_HEADER = b"mcp-session-id"
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


class StoreEventStore(EventStore):
    """The SDK's ``EventStore`` on tarry's store ([`StreamEvents`][tarry.store.StreamEvents]), scoped per session."""

    def __init__(self, events: StreamEvents) -> None:
        self.events = events

    @staticmethod
    def _current() -> str:
        scope = _scope.get()
        if scope is None:
            raise RuntimeError("StoreEventStore needs SessionScopes around the app that uses it")
        return scope

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        """Keep the event; its id is what the client sends back as ``Last-Event-ID``."""
        wire: dict[str, Any] | None = None
        if message is not None:
            wire = message.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return await self.events.add(self._current(), str(stream_id), wire)

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
