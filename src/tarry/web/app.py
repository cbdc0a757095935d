"""``create_app``: the inbox page and the JSON API as one ASGI app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from tarry.store import Store
from tarry.web.access import Access, Authorize, Identify
from tarry.web.api import API_REFUSALS, api_router
from tarry.web.decisions import Decider, OnAnswer
from tarry.web.events import LiveSignal
from tarry.web.guard import Guard
from tarry.web.identity import ProxyIdentity, Users
from tarry.web.oauth import CALLBACK_PATH, receive_login
from tarry.web.pages import Pages, Refused, page_router, root_of
from tarry.web.problems import Problem, finish_openapi

STATIC = Path(__file__).parent / "static"


def create_app(
    store: Store,
    *,
    authorize: Authorize | None = None,
    on_answer: OnAnswer | None = None,
    token: str | None = None,
    identify: Identify | None = None,
    users: Users | None = None,
    proxy: ProxyIdentity | None = None,
    link_secret: str | bytes | None = None,
) -> FastAPI:
    """The inbox page and JSON API for what ``store``'s chats wait on, as an ASGI app.

    Mount it into an existing FastAPI or Starlette app (``app.mount("/inbox", create_app(store))``)
    or run it with ``tarry serve``.

    ``authorize(request, item)`` decides, item by item, who may see each question (and answer
    it), each working task and each chat (a [`ChatRef`][tarry.web.ChatRef]); with ``None``
    it is asked about the inbox as a whole, which only gates the pages, the API and request
    bodies. It may be a coroutine. Without it the app requires a login token: ``token``, else
    a random one, kept as ``app.state.token``. A browser exchanges it once at
    ``/login?token=…`` for a session cookie; scripts send ``Authorization: Bearer <token>``.
    Passing both ``authorize`` and ``token`` raises ``ValueError``.

    ``users`` ([`Users`][tarry.web.Users]) gives people tokens of their own, which they
    use as the shared token is used; ``proxy`` ([`ProxyIdentity`][tarry.web.ProxyIdentity])
    trusts an authenticating reverse proxy's identity header, from the proxy's addresses only.
    Either one alone means no shared token unless ``token`` is given. Both name verified
    principals, who can make a two-person approval; the shared token names nobody in
    particular ([`TOKEN_HOLDER`][tarry.web.TOKEN_HOLDER], self-declared), who cannot.

    Every decision made through the app records who made it: ``identify(request)`` returns an
    identity or a [`Principal`][tarry.principals.Principal] (sync or async); without it, a login
    token's decisions are recorded as [`TOKEN_HOLDER`][tarry.web.TOKEN_HOLDER] and, with
    ``authorize``, as the user the host app's authentication middleware set
    (``request.user.identity``). The page records the channel ``web``, the API ``api``. An
    approval its policy refuses ([`NotAllowedError`][tarry.errors.NotAllowedError]) is a 403.

    ``on_answer(question)`` runs after each decision recorded through the app, with the
    decided question (sync or async). The store's ``decision_hooks`` run in any case, before
    it: register the worker's wake-up or the Celery enqueue there once for every way of
    answering, and use ``on_answer`` for what only the web should do.

    ``link_secret`` (the one [`EmailSender`][tarry.mail.EmailSender]'s [`LinkSigner`][tarry.mail.LinkSigner]
    has; needs ``tarry[notify]``) serves the signed links of emails at ``/links/{token}``, outside the login:
    opening one shows the question and a form to confirm, and only the form decides, as the link's person,
    verified, through the channel ``email``.
    """
    access = Access(authorize, token, identify, users, proxy)
    decider = Decider(store, access, on_answer)
    pages = Pages(access)
    live = LiveSignal(store)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await live.close()  # a mounted app gets no lifespan: its signal then ends with its event loop

    def refuse(connection: HTTPConnection, status: int, reason: str) -> Response:
        path, root = connection.url.path, root_of(connection)
        if path.removeprefix(root).startswith("/api/"):
            return Problem(status, API_REFUSALS[reason]).response(connection)
        return pages.refused(connection, status, reason)

    app = FastAPI(
        title="tarry inbox",
        summary="What tarry's chats wait on: questions to answer, calls to approve, tasks at work.",
        version="1",
        openapi_url="/api/openapi.json",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.token = access.token
    app.state.store = store

    @app.exception_handler(Problem)
    async def problem(request: Request, error: Problem) -> Response:
        return error.response(request)

    @app.exception_handler(Refused)
    async def refused(request: Request, error: Refused) -> Response:
        return pages.refused(request, error.status, error.reason)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> Response:
        errors = {".".join(str(part) for part in item["loc"]): str(item["msg"]) for item in error.errors()}
        return Problem(400, "The request does not fit the API.", errors=errors).response(request)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> Response:
        response = Problem(error.status_code, str(error.detail)).response(request)
        for name, value in (error.headers or {}).items():
            response.headers[name] = value
        return response

    @app.get(CALLBACK_PATH, include_in_schema=False)
    async def oauth_callback(request: Request) -> Response:
        """Where a person lands after logging in to an MCP server (the state is the only key; see tarry.web.oauth)."""
        return await receive_login(store, request)

    app.include_router(api_router(decider), prefix="/api")
    app.include_router(page_router(decider, pages, live))
    open_posts: tuple[str, ...] = ()
    if link_secret is not None:  # imported here: the links need tarry[notify], which the inbox alone does not
        from tarry.mail.links import LinkSigner
        from tarry.web.links import link_router

        app.include_router(link_router(decider, pages, LinkSigner(link_secret)))
        open_posts = ("/links/",)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.add_middleware(Guard, access=access, refuse=refuse, open_posts=open_posts)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes, servers=app.servers
            )
            app.openapi_schema = finish_openapi(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app
