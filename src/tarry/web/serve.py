"""Running the inbox with uvicorn: what ``tarry serve`` does."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable
from typing import Any, cast

import uvicorn
from starlette.middleware.trustedhost import TrustedHostMiddleware
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from tarry.approvals import MayDecide
from tarry.hosts import loopback, wildcard
from tarry.store import Store
from tarry.web.app import create_app
from tarry.web.identity import ProxyIdentity, Users, remember_peer


def exposure_warning(host: str) -> str | None:
    """What ``tarry serve`` says when ``host`` lets other machines in over plain HTTP (``None``: it does not)."""
    if loopback(host):
        return None
    return (
        f"Warning: serving plain HTTP on {host}, reachable from the network: the login token and every "
        "answer travel unencrypted. Serve it behind an HTTPS reverse proxy, or on 127.0.0.1."
    )


def inbox_hosts(host: str, extra: Iterable[str] = ()) -> list[str]:
    """The ``Host`` headers the inbox answers, bound on ``host``: loopback's names, ``host`` itself, and ``extra``.

    A page on another site that a rebound DNS name points at this machine sends its own name in
    ``Host``, so it is refused (DNS rebinding). Bound on every interface with no ``extra`` given, the
    inbox cannot know its names and answers any (``["*"]``).
    """
    names = [name.lower() for name in extra]
    if wildcard(host):
        return names or ["*"]
    own = ["127.0.0.1", "localhost", "[::1]"]
    if not loopback(host):
        own.append(f"[{host.strip('[]')}]" if ":" in host else host)
    return own + names


def login_url(host: str, port: int, token: str, root: str = "") -> str:
    """The link that logs a browser in."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{root}/login?token={token}"


async def serve(
    url: str | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    say: Callable[[str], None] = print,
    users: Users | None = None,
    proxy: ProxyIdentity | None = None,
    may_decide: MayDecide | None = None,
    allowed_hosts: Iterable[str] = (),
    link_secret: str | None = None,
) -> None:
    """Serve the inbox of the database at ``url`` until interrupted, printing the login link once.

    ``port=0`` picks a free port; the printed link names the one bound. ``users``, ``proxy``:
    who people are (see [`create_app`][tarry.web.create_app]); with either, there is no shared login
    link. ``may_decide``: the deployment's check for approvals whose policy names ``by``.
    ``allowed_hosts``: names besides the bound address's that a request's ``Host`` may give (a proxy's
    public name, say); any other is refused with 400 ([`inbox_hosts`][tarry.web.serve.inbox_hosts]).
    ``link_secret``: serve the signed links of emails (``tarry serve`` reads it from ``TARRY_LINK_SECRET``).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)  # before the link is printed, so a client that follows it at once is not refused
    bound = sock.getsockname()[1]
    async with Store(url, may_decide=may_decide) as store:
        app = create_app(store, token=token, users=users, proxy=proxy, link_secret=link_secret)
        await store.setup()
        say(f"tarry inbox for {store.url}")
        warning = exposure_warning(host)
        if warning:
            say(warning)
        if app.state.token:
            link = login_url(host, bound, app.state.token)
            say(f"Open this link to log in (it holds the token; keep it private): {link}")
        if users is not None:
            say(f"{len(users)} user(s) log in with their own token: {login_url(host, bound, '<token>')}")
        if link_secret is not None:
            say("Serving the signed links of emails under /links/")
        if proxy is not None:
            proxies = ", ".join(str(network) for network in proxy.proxies)
            say(f"Trusting the {proxy.header} header from {proxies} only")
        # Open event streams end by themselves within 30 s; a shutdown need not wait that long.
        # uvicorn's proxy headers, applied inside remember_peer: the identity header is judged by the proxy's
        # own address, not the one it forwards (which a client may write into X-Forwarded-For).
        trusted = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
        forwarded: Any = ProxyHeadersMiddleware(cast(Any, app), trusted_hosts=trusted)  # uvicorn's own ASGI types
        served = TrustedHostMiddleware(remember_peer(forwarded), allowed_hosts=inbox_hosts(host, allowed_hosts))
        config = uvicorn.Config(
            served, log_level="warning", lifespan="off", timeout_graceful_shutdown=3, proxy_headers=False
        )
        await uvicorn.Server(config).serve(sockets=[sock])
