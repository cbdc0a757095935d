"""The app's outer layer, as a pure ASGI middleware: who may send a body, how big, and the headers of every response."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tarry.web.access import Access

MAX_BODY = 1_000_000
"""The largest request body the inbox reads, in bytes; a bigger one is refused with 413 unread."""
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
BODILESS = ("GET", "HEAD", "OPTIONS")
Refusal = Callable[[HTTPConnection, int, str], Response]
"""Makes the response that refuses a request: ``(connection, status, reason)``, the reason one of
``"login"``, ``"forbidden"`` or ``"too-large"``."""


class Guard:
    """Wraps the app: adds the security headers (and ``Cache-Control: no-store`` outside ``/static``)
    to every response, and checks a request that carries a body before a byte of it is read.

    A request with a body must be logged in and allowed into the inbox (else 401 or 403,
    from ``refuse``), then must declare or send at most ``max_body`` bytes (else 413). A path under
    one of ``open_posts`` (under the app's root: ``"/links/"``) carries its own proof and skips the login.
    """

    def __init__(
        self, app: ASGIApp, access: Access, refuse: Refusal, max_body: int = MAX_BODY, open_posts: tuple[str, ...] = ()
    ) -> None:
        self.app = app
        self.access = access
        self.refuse = refuse
        self.max_body = max_body
        self.open_posts = open_posts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = with_security_headers(scope, send)
        if scope["method"] in BODILESS:
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        refusal = None if self._proves_itself(connection) else await self._login_refusal(connection)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        declared = connection.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            await self._too_large(connection)(scope, receive, send)
            return
        body = await self._read(receive)
        if body is None:
            await self._too_large(connection)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    def _proves_itself(self, connection: HTTPConnection) -> bool:
        """True for a post to a path that carries its own proof (a signed link), which needs no login."""
        root = str(connection.scope.get("root_path", "")).rstrip("/")
        path = connection.url.path.removeprefix(root)
        return any(path.startswith(prefix) for prefix in self.open_posts)

    async def _login_refusal(self, connection: HTTPConnection) -> Response | None:
        """The refusal of a request that is not logged in (401) or not allowed into the inbox (403), else ``None``."""
        if not self.access.logged_in(connection):
            return self.refuse(connection, 401, "login")
        if not await self.access.allowed(connection, None):
            return self.refuse(connection, 403, "forbidden")
        return None

    def _too_large(self, connection: HTTPConnection) -> Response:
        return self.refuse(connection, 413, "too-large")

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or ``None`` once it grows past the limit (the rest is never read)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def with_security_headers(scope: Scope, send: Send) -> Send:
    """``send``, adding ``SECURITY_HEADERS`` (unless the app set its own) and, outside ``/static``,
    ``Cache-Control: no-store`` to the response: the one place the inbox and the OAuth redirect endpoint get them."""
    root = str(scope.get("root_path", "")).rstrip("/")
    path = str(scope.get("path", ""))
    static = path.startswith((f"{root}/static/", "/static/"))

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            for name, value in SECURITY_HEADERS.items():
                headers.setdefault(name, value)
            if not static:
                headers["Cache-Control"] = "no-store"
        await send(message)

    return sending


class SecurityHeaders:
    """A pure ASGI middleware that gives every HTTP response of ``app`` the inbox's security headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        await self.app(scope, receive, with_security_headers(scope, send) if scope["type"] == "http" else send)


def _replay(body: bytes, receive: Receive) -> Callable[[], Awaitable[Message]]:
    """A ``receive`` that hands the app the body already read, then waits on the real one."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
