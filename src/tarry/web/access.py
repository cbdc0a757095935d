"""Who may use the inbox: the login token, the session cookie, CSRF tokens and ``authorize``."""

from __future__ import annotations

import base64
import hashlib
import hmac
import inspect
import json
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection
from starlette.responses import Response

from tarry.principals import Principal, principal_of
from tarry.questions import Question
from tarry.store.audit import DecisionEvent
from tarry.store.waiting import WaitingTask
from tarry.web.identity import ProxyIdentity, Users


@dataclass(frozen=True)
class ChatRef:
    """A chat as ``authorize`` is asked about it: the chat filter and the chat's page."""

    chat_id: str


Shown = Question | WaitingTask | ChatRef | DecisionEvent
"""What ``authorize`` is asked about, item by item; each has a ``chat_id``."""
Identify = Callable[[HTTPConnection], str | Principal | Awaitable[str | Principal | None] | None]
"""Says who is asking (an identity or a [`Principal`][tarry.principals.Principal]), for the decisions they make."""
TOKEN_HOLDER = Principal("inbox-token", "Inbox token holder", verified=False)
"""Who a decision made with the shared login token is recorded as: the token names nobody in particular, so it
never satisfies an approval policy's ``by`` nor counts toward a ``count`` above one."""
Authorize = Callable[[HTTPConnection, Shown | None], bool | Awaitable[bool]]
"""Decides whether a request may see (and answer) a question, a task or a chat; ``None``: the inbox as a whole."""
T = TypeVar("T", bound=Shown)

CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
PRINCIPAL = "tarry.principal"
"""Where a request's scope keeps who ``Access.principal`` found it comes from."""
IDENTITY_PROBLEM = "tarry.identity_problem"
"""Where a request's scope keeps why its identity cannot be recorded, when it cannot."""


class NotLoggedIn(Exception):
    """The request carries neither the session cookie nor the token."""


class Forbidden(Exception):
    """The request may not see or answer this; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def cookie_name(connection: HTTPConnection, base: str) -> str:
    """The name of one of the inbox's cookies for this origin.

    Browsers send cookies to every port of a host, so on plain HTTP the name carries the
    port (two inboxes on 127.0.0.1 never share or overwrite a cookie); on HTTPS the
    ``__Host-`` prefix makes the browser refuse the cookie from any other origin.
    """
    if connection.url.scheme == "https":
        return f"__Host-{base}"
    return f"{base}_{connection.url.port or 80}"


def _set_cookie(response: Response, connection: HTTPConnection, base: str, value: str, path: str) -> None:
    secure = connection.url.scheme == "https"
    response.set_cookie(
        cookie_name(connection, base),
        value,
        httponly=True,
        samesite="strict",
        secure=secure,
        path="/" if secure else path,
    )


class Access:
    """The inbox's checks of who is asking.

    With ``authorize``, every question, task and chat is shown to (and answered by) whoever
    it returns ``True`` for; the host app authenticates people its own way. Without it, the
    inbox requires ``token``: a browser exchanges it once at ``/login?token=…`` for a session
    cookie, and scripts send it as ``Authorization: Bearer …``.
    """

    def __init__(
        self,
        authorize: Authorize | None,
        token: str | None,
        identify: Identify | None = None,
        users: Users | None = None,
        proxy: ProxyIdentity | None = None,
    ) -> None:
        if authorize is not None and (token is not None or users is not None or proxy is not None):
            raise ValueError(
                "create_app takes authorize or token (or users, proxy: the inbox's own logins), not both: with "
                "authorize your app authenticates people"
            )
        self.authorize = authorize
        self.identify = identify
        self.users = users
        self.proxy = proxy
        self.token = token if authorize is None else None
        if authorize is None and not self.token and users is None and proxy is None:
            self.token = secrets.token_urlsafe(24)
        self._secret = secrets.token_bytes(32)

    def _sign(self, purpose: str, value: str) -> str:
        return hmac.new(self._secret, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()

    def _signed(self, purpose: str, value: str, signature: str) -> bool:
        return hmac.compare_digest(signature.encode(), self._sign(purpose, value).encode())

    # Login

    @property
    def logs_in(self) -> bool:
        """True when the inbox checks logins itself (a token, per-user tokens or a trusted proxy), not ``authorize``."""
        return self.authorize is None

    def token_matches(self, given: str | None) -> bool:
        """True when ``given`` is the shared login token."""
        return self.token is not None and given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def login_of(self, given: str | None) -> str | None:
        """Whose login ``given`` is: ``""`` for the shared token, a user's id for their own token, else ``None``."""
        if self.token_matches(given):
            return ""
        user = self.users.find(given) if self.users is not None else None
        return None if user is None else user.id

    def log_in(self, response: Response, connection: HTTPConnection, path: str, user: str = "") -> None:
        """Give the browser a session cookie of its own, for ``user`` (``""``: the shared token): a random id,
        signed with the origin it is for."""
        session = secrets.token_urlsafe(18)
        if user:
            session += "~" + base64.urlsafe_b64encode(user.encode()).decode().rstrip("=")
        signature = self._sign("session", f"{origin_of(connection)}|{session}")
        _set_cookie(response, connection, "tarry_session", f"{session}.{signature}", path)

    def session(self, connection: HTTPConnection) -> str | None:
        """The id of the browser's valid session cookie, if it sent one.

        Browsers send cookies to every port of a host, so a cookie can reach another server,
        which could send it back under any name: it is valid only at the origin (scheme, host
        and port) it was issued for.
        """
        cookie = connection.cookies.get(cookie_name(connection, "tarry_session"), "")
        session, _, signature = cookie.partition(".")
        valid = session and self._signed("session", f"{origin_of(connection)}|{session}", signature)
        return session if valid else None

    def _login_user(self, connection: HTTPConnection) -> Principal | None:
        """The user whose own token the request carries (as a bearer token, or by its session), if any."""
        if self.users is None:
            return None
        header = connection.headers.get("authorization", "")
        if header[:7].lower() == "bearer ":
            return self.users.find(header[7:].strip())
        _, _, encoded = (self.session(connection) or "").partition("~")
        if not encoded:
            return None
        return self.users.named(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode())

    def logged_in(self, connection: HTTPConnection) -> bool:
        """True when the request may use the inbox at all (always, when ``authorize`` decides)."""
        if not self.logs_in:
            return True
        if self.proxy is not None and self.proxy.principal(connection) is not None:
            return True
        header = connection.headers.get("authorization", "")
        if header[:7].lower() == "bearer " and self.login_of(header[7:].strip()) is not None:
            return True
        session = self.session(connection)
        return session is not None and ("~" not in session or self._login_user(connection) is not None)

    async def allowed(self, connection: HTTPConnection, item: Shown | None) -> bool:
        """True when the request may see (and answer) ``item`` (``None``: the inbox as a whole)."""
        if not self.logged_in(connection):
            return False
        if self.authorize is None:
            return True
        verdict = self.authorize(connection, item)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return verdict is True

    async def shown(self, connection: HTTPConnection, items: Iterable[T]) -> list[T]:
        """The items the request may see, in their order."""
        return [item for item in items if await self.allowed(connection, item)]

    async def require(self, connection: HTTPConnection, item: Shown | None) -> None:
        """Raise ``NotLoggedIn`` or ``Forbidden`` unless ``allowed``."""
        if not self.logged_in(connection):
            raise NotLoggedIn()
        if not await self.allowed(connection, item):
            raise Forbidden("You may not see or answer this.")

    async def principal(self, connection: HTTPConnection) -> Principal | None:
        """Who a decision of this request is recorded as (asked once per request).

        ``identify(request)`` when given; else the identity header from a trusted proxy; else the
        user whose own token the request carries; else, with the shared login token,
        [`TOKEN_HOLDER`][tarry.web.TOKEN_HOLDER]; else the user the host app's authentication middleware set
        (``request.user``), if any.
        """
        if PRINCIPAL not in connection.scope:
            try:
                connection.scope[PRINCIPAL] = await self._principal(connection)
            except ValueError as error:  # an identity the store cannot record: pages show, decisions refuse
                connection.scope[PRINCIPAL] = None
                connection.scope[IDENTITY_PROBLEM] = str(error)
        found: Principal | None = connection.scope[PRINCIPAL]
        return found

    async def identity_problem(self, connection: HTTPConnection) -> str | None:
        """Why this request's identity cannot be recorded (too long, NUL, a lone surrogate), else ``None``."""
        await self.principal(connection)
        problem: str | None = connection.scope.get(IDENTITY_PROBLEM)
        return problem

    async def _principal(self, connection: HTTPConnection) -> Principal | None:
        if self.identify is not None:
            found = self.identify(connection)
            if inspect.isawaitable(found):
                found = await found
            return principal_of(found)
        if self.logs_in:
            proxied = self.proxy.principal(connection) if self.proxy is not None else None
            return proxied or self._login_user(connection) or (TOKEN_HOLDER if self.logged_in(connection) else None)
        identity = user_identity(connection)
        if identity is None:
            return None
        user = connection.scope.get("user")
        name = getattr(user, "display_name", None)
        return Principal(identity, name if isinstance(name, str) and name and name != identity else None)

    def who(self, connection: HTTPConnection) -> str | None:
        """Who is asking, as far as the inbox can tell: the session, the bearer token, else the browser.

        Used to tell people that a decision they try again was their own; ``None`` when unknown.
        """
        session = self.session(connection)
        if session is not None:
            return f"session:{session}"
        header = connection.headers.get("authorization")
        if header:
            return f"authorization:{hashlib.sha256(header.encode()).hexdigest()}"
        identity = user_identity(connection)
        if identity:
            return f"user:{identity}"
        cookie = self.csrf_cookie(connection)
        return f"browser:{cookie}" if cookie else None

    # CSRF

    def _csrf_binding(self, connection: HTTPConnection) -> str:
        """Who the CSRF token belongs to: the session and the person (``principal``, once asked), else the
        ``Authorization`` header (with ``authorize`` and nobody identified)."""
        principal: Principal | None = connection.scope.get(PRINCIPAL)
        parts = [self.session(connection), None if principal is None else principal.id]
        return json.dumps([*parts, connection.headers.get("authorization")])

    def csrf_cookie(self, connection: HTTPConnection) -> str | None:
        """The browser's CSRF cookie, if it sent one."""
        return connection.cookies.get(cookie_name(connection, "tarry_csrf"))

    def new_csrf_cookie(self) -> str:
        """A fresh random value for the CSRF cookie."""
        return secrets.token_urlsafe(24)

    def set_csrf_cookie(self, response: Response, connection: HTTPConnection, value: str, path: str) -> None:
        """Give the browser its CSRF cookie."""
        _set_cookie(response, connection, "tarry_csrf", value, path)

    def csrf_token(self, connection: HTTPConnection, cookie: str) -> str:
        """The token forms carry for the browser holding ``cookie``, in this session, for the person asking.

        The person is who ``principal`` found for this request; a page with forms asks it first
        (a page without, such as a refusal, may carry a token that is good for nobody).
        """
        return self._sign("csrf", f"{cookie}|{self._csrf_binding(connection)}")

    async def csrf_valid(self, connection: HTTPConnection, token: str | None) -> bool:
        """True when ``token`` belongs to the request's CSRF cookie, session and person, sent from this origin."""
        cookie = self.csrf_cookie(connection)
        if not cookie or not token or not same_origin(connection):
            return False
        await self.principal(connection)
        return hmac.compare_digest(token.encode(), self.csrf_token(connection, cookie).encode())

    async def api_write_allowed(self, connection: HTTPConnection) -> bool:
        """True when an API write cannot be a cross-site forgery.

        Browsers send neither an ``Authorization`` header, nor a JSON body, nor a custom
        header to another site without a CORS preflight, which this app never grants; a
        request the browser marks as coming from another origin is refused outright.
        """
        if not same_origin(connection):
            return False
        if connection.headers.get("authorization"):
            return True
        media_type = connection.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type == "application/json":
            return True
        return await self.csrf_valid(connection, connection.headers.get(CSRF_HEADER))


def user_identity(connection: HTTPConnection) -> str | None:
    """The user the host app authenticated (Starlette's authentication middleware), if any."""
    user = connection.scope.get("user")
    for attribute in ("identity", "display_name"):
        try:
            value = getattr(user, attribute, None)
        except NotImplementedError:  # a BaseUser subclass that leaves it out
            continue
        if value:
            return str(value)
    return None


def same_origin(connection: HTTPConnection) -> bool:
    """False when the browser says the request came from another origin (another port of this host included).

    ``Sec-Fetch-Site`` tells it where browsers send it; else an ``Origin`` header other than
    ``null`` (what a page under ``Referrer-Policy: no-referrer`` sends) must be this origin.
    """
    if connection.headers.get("sec-fetch-site") in ("cross-site", "same-site"):
        return False
    origin = connection.headers.get("origin")
    if origin is None or origin == "null":
        return True  # the CSRF token, or the API's header and media type checks, decide
    parts = urlsplit(origin)
    here = connection.url
    return (parts.scheme, parts.hostname, parts.port or _default_port(parts.scheme)) == (
        here.scheme,
        here.hostname,
        here.port or _default_port(here.scheme),
    )


def origin_of(connection: HTTPConnection) -> str:
    """The origin the request was sent to: its scheme, host and port (the default port written out)."""
    url = connection.url
    return f"{url.scheme}://{url.hostname}:{url.port or _default_port(url.scheme)}"


def _default_port(scheme: str) -> int:
    return 443 if scheme in ("https", "wss") else 80
