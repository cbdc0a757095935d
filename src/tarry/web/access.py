"""Who may use the inbox: the login token, the session cookie, CSRF tokens and ``authorize``."""

from __future__ import annotations

import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from tarry.questions import Question

Authorize = Callable[[Request, Question | None], bool | Awaitable[bool]]
"""Decides whether a request may see and answer a question (``None``: the inbox as a whole)."""

SESSION_COOKIE = "tarry_session"
CSRF_COOKIE = "tarry_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"


class NotLoggedIn(Exception):
    """The request carries neither the session cookie nor the token."""


class Forbidden(Exception):
    """The request may not see or answer this; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Access:
    """The inbox's checks of who is asking.

    With ``authorize``, every question is shown to and answered by whoever it returns
    ``True`` for; the host app authenticates people its own way. Without it, the inbox
    requires ``token``: a browser exchanges it once at ``/login?token=…`` for a session
    cookie, and scripts send it as ``Authorization: Bearer …``.
    """

    def __init__(self, authorize: Authorize | None, token: str | None) -> None:
        self.authorize = authorize
        self.token = token if authorize is None else None
        if authorize is None and not self.token:
            self.token = secrets.token_urlsafe(24)
        self._secret = secrets.token_bytes(32)

    def _sign(self, purpose: str, value: str) -> str:
        return hmac.new(self._secret, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()

    # Login

    def token_matches(self, given: str | None) -> bool:
        """True when ``given`` is the login token."""
        return self.token is not None and given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def log_in(self, response: Response, path: str) -> None:
        """Give the browser the session cookie."""
        assert self.token is not None
        response.set_cookie(
            SESSION_COOKIE, self._sign("session", self.token), httponly=True, samesite="strict", path=path
        )

    def logged_in(self, request: Request) -> bool:
        """True when the request may use the inbox at all (always, when ``authorize`` decides)."""
        if self.token is None:
            return True
        header = request.headers.get("authorization", "")
        if header[:7].lower() == "bearer " and self.token_matches(header[7:].strip()):
            return True
        cookie = request.cookies.get(SESSION_COOKIE)
        return cookie is not None and hmac.compare_digest(cookie.encode(), self._sign("session", self.token).encode())

    async def allowed(self, request: Request, question: Question | None) -> bool:
        """True when the request may see and answer ``question`` (``None``: the inbox as a whole)."""
        if not self.logged_in(request):
            return False
        if self.authorize is None:
            return True
        verdict = self.authorize(request, question)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return verdict is True

    async def require(self, request: Request, question: Question | None) -> None:
        """Raise :class:`NotLoggedIn` or :class:`Forbidden` unless :meth:`allowed`."""
        if not self.logged_in(request):
            raise NotLoggedIn()
        if not await self.allowed(request, question):
            raise Forbidden("You may not see or answer this.")

    # CSRF

    def csrf_cookie(self, request: Request) -> str | None:
        """The browser's CSRF cookie, if it sent one."""
        return request.cookies.get(CSRF_COOKIE)

    def new_csrf_cookie(self) -> str:
        """A fresh random value for the CSRF cookie."""
        return secrets.token_urlsafe(24)

    def set_csrf_cookie(self, response: Response, value: str, path: str) -> None:
        """Give the browser its CSRF cookie."""
        response.set_cookie(CSRF_COOKIE, value, httponly=True, samesite="strict", path=path)

    def csrf_token(self, cookie: str) -> str:
        """The token forms carry for the browser holding ``cookie``."""
        return self._sign("csrf", cookie)

    def csrf_valid(self, request: Request, token: str | None) -> bool:
        """True when ``token`` belongs to the request's CSRF cookie."""
        cookie = self.csrf_cookie(request)
        if not cookie or not token:
            return False
        return hmac.compare_digest(token.encode(), self.csrf_token(cookie).encode())

    def api_write_allowed(self, request: Request) -> bool:
        """True when an API write cannot be a cross-site forgery.

        Browsers send neither an ``Authorization`` header, nor a JSON body, nor a custom
        header to another site without a CORS preflight, which this app never grants; a
        ``Sec-Fetch-Site: cross-site`` request is refused outright.
        """
        if request.headers.get("sec-fetch-site") == "cross-site":
            return False
        if request.headers.get("authorization"):
            return True
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type == "application/json":
            return True
        return self.csrf_valid(request, request.headers.get(CSRF_HEADER))
