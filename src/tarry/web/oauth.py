"""The OAuth redirect endpoint: where a person lands after logging in to an MCP server.

``create_app`` serves it at ``/oauth/callback``; [`serve_callback`][tarry.web.serve_callback] serves it alone, on
127.0.0.1, for scripts without the inbox. The ``state`` of the redirect is the only key: it
names a login tarry recorded (unguessable, 256 bits), it is used once, and it expires. The
code is recorded on that login and the login's URL question answered, so whichever process
carries the chat on next finishes the login. Neither the code nor the state is logged.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from tarry.errors import TarryError
from tarry.store import Store
from tarry.web.guard import SecurityHeaders
from tarry.web.views import visible

CALLBACK_PATH = "/oauth/callback"
_PAGES = {
    "done": (200, "Logged in", "You are logged in. The chat that waited for this login carries on; close this page."),
    "used": (409, "Already used", "This login link was used already. A chat that still waits asks for a new login."),
    "expired": (410, "Login expired", "This login took too long. A chat that still needs it asks for a new login."),
    "unknown": (404, "Unknown login", "tarry started no login with this link, or it was forgotten."),
}


REFUSED = "Login refused"
KEPT_NOTHING = "Nothing was kept as logged in; the chat that waited for this login says so when it carries on."
REASON_LIMIT = 500
"""The most characters of an authorization server's reason shown on the page."""


async def receive_login(store: Store, request: Request) -> Response:
    """Handle one redirect: record its code (or its refusal) on the login its ``state`` names, and say how that went.

    Text from the query is shown only once the state names a login tarry is waiting for: anyone can
    send a person a link to this endpoint, with any words in its ``error_description``.
    """
    query = request.query_params
    broken = next((name for name, value in query.multi_items() if "\x00" in name + value), None)
    if broken is not None:
        detail = "It holds a NUL character, which no login link does. Nothing was recorded."
        return _page(400, "Not a login link", f"This is not a link an authorization server sends back. {detail}")
    state, error = query.get("state", ""), query.get("error")
    if error:
        reason = visible(query.get("error_description") or error)[:REASON_LIMIT]
        if await store.oauth.refuse(state, reason) != "refused":
            detail = "This link names no login tarry is waiting for, so nothing was recorded."
            return _page(400, REFUSED, f"The login was refused. {detail}")
        return _page(400, REFUSED, f"The authorization server refused the login: {reason}. {KEPT_NOTHING}")
    outcome = await store.oauth.receive_code(state, query.get("code", ""), query.get("iss"))
    if outcome == "refused":
        why = visible(await store.oauth.refusal(state) or "")[:REASON_LIMIT]
        return _page(400, REFUSED, f"The login was refused: {why}. {KEPT_NOTHING}")
    return _page(*_PAGES[outcome])


def callback_app(store: Store) -> Starlette:
    """An ASGI app with only the redirect endpoint, at ``/oauth/callback``."""

    async def callback(request: Request) -> Response:
        return await receive_login(store, request)

    return Starlette(routes=[Route(CALLBACK_PATH, callback, methods=["GET"])], middleware=[Middleware(SecurityHeaders)])


@asynccontextmanager
async def serve_callback(store: Store, *, port: int = 8976, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve the redirect endpoint alone while the block runs; yields its URL (``redirect_uri=``).

    ``async with serve_callback(store, port=8976) as redirect_uri: ...`` listens on the
    loopback interface unless ``host`` says otherwise, from before the block starts until it
    ends. The access log is off, since a redirect's URL carries the code.
    """
    import uvicorn

    config = uvicorn.Config(callback_app(store), host=host, port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:
        if serving.done():
            await serving
            raise TarryError(f"The OAuth redirect endpoint could not listen on {host}:{port}")
        await asyncio.sleep(0.01)  # uvicorn says it listens by a flag only
    try:
        yield f"http://{host}:{port}{CALLBACK_PATH}"
    finally:
        server.should_exit = True
        await serving


def _page(status: int, title: str, text: str) -> HTMLResponse:
    body = (
        f"<!doctype html><html lang=en><meta charset=utf-8><title>{html.escape(title)} - tarry</title>"
        f"<body><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(text)}</p></body></html>"
    )
    return HTMLResponse(body, status_code=status)
