"""``tarry mcp serve``: tarry tools as an MCP server, over streamable HTTP or stdio."""

from __future__ import annotations

import argparse
import math
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tarry.agents import Agent
from tarry.cli.arguments import positive_int
from tarry.hosts import loopback, wildcard
from tarry.specs import SpecError, load_spec
from tarry.tools import Tool

TOKEN_VARIABLE = "TARRY_MCP_TOKEN"

URL_HELP = "database URL (default: TARRY_DATABASE_URL, else sqlite:///tarry.db)"


def load_tools(spec: str) -> list[Any]:
    """The tools ``module:name`` names: a list of tools (or functions), an Agent, or a function returning either."""
    value: Any = load_spec(spec, "--tools")
    if callable(value) and not isinstance(value, Agent | Tool | list | tuple):
        value = value()
    items = value.tools if isinstance(value, Agent) else value
    if isinstance(items, Tool) or not isinstance(items, list | tuple):
        raise SpecError(f"--tools {spec} holds {value!r}: expected a list of tools or an Agent")
    return list(items)  # the server turns functions into tools, and refuses anything else naming it


def add_parser(commands: Any, handler: Callable[[argparse.Namespace], int]) -> None:
    """Add ``tarry mcp serve`` to the ``tarry`` command."""
    mcp = commands.add_parser("mcp", help="tarry tools as an MCP server")
    mcp_commands = mcp.add_subparsers(dest="mcp_command", required=True)
    serve = mcp_commands.add_parser(
        "serve",
        help="serve tools over MCP; slow calls and questions live in the database",
        description=(
            "Serve tarry tools as an MCP server (streamable HTTP at /mcp, or stdio). Every call is kept in the "
            "database, so several server processes (and `tarry worker`) serve the same tasks."
        ),
    )
    serve.add_argument("--tools", required=True, metavar="MODULE:NAME", help="a list of tools, or an Agent")
    serve.add_argument("--url", help=URL_HELP)
    serve.add_argument("--name", default="tarry", help="the server's name; processes of one server share it")
    serve.add_argument("--stdio", action="store_true", help="serve one client over stdin and stdout")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on; 0 picks a free one (default: 8000)")
    serve.add_argument(
        "--approvals", choices=["client", "inbox"], default="client",
        help="who approves tools that require approval: the MCP client, or a person in tarry's inbox",
    )  # fmt: skip
    serve.add_argument("--lease", type=float, default=60.0, help="seconds a claim lasts unrenewed (default: 60)")
    serve.add_argument(
        "--stream-hold", type=float, metavar="SECONDS",
        help="close a waiting call's SSE stream after this long; the client resumes it with Last-Event-ID",
    )  # fmt: skip
    serve.add_argument(
        "--task-required", action="append", default=[], metavar="TOOL",
        help="serve this tool only as an MCP task: its work is too long to hold a request open (repeatable)",
    )  # fmt: skip
    serve.add_argument(
        "--ask-before-task", action="append", default=[], metavar="TOOL",
        help="ask this tool's questions in the call itself; it becomes a task once they are answered (repeatable)",
    )  # fmt: skip
    serve.add_argument(
        "--token-file", type=Path, metavar="PATH",
        help=f"bearer tokens clients must send, one a line, each a client of its own (or set {TOKEN_VARIABLE})",
    )  # fmt: skip
    serve.add_argument("--token", help="a bearer token clients must send (visible to other users in ps: prefer a file)")
    serve.add_argument(
        "--max-sessions", type=positive_int, metavar="N",
        help="sessions open at once; a client that would open one more gets 503 (default: 1000)",
    )  # fmt: skip
    serve.add_argument(
        "--session-idle-timeout", type=_positive_seconds, metavar="SECONDS",
        help="close a session after this long with no request (default: 1800)",
    )  # fmt: skip
    serve.add_argument(
        "--allowed-host", action="append", default=[], metavar="HOST[:PORT]",
        help="a Host header requests may carry besides loopback's and the bound address's (repeatable; PORT may be *)",
    )  # fmt: skip
    serve.set_defaults(handler=handler)


def tokens_of(arguments: argparse.Namespace) -> list[str]:
    """The bearer tokens the options or ``TARRY_MCP_TOKEN`` give (none: no auth; the variable is ignored with stdio).

    A token file holds one token a line; blank lines and lines starting with ``#`` are skipped.
    """
    tokens = [arguments.token] if arguments.token else []
    if arguments.token_file is not None:
        lines = (line.strip() for line in arguments.token_file.read_text().splitlines())
        tokens += [line for line in lines if line and not line.startswith("#")]
        if not tokens:
            raise ValueError(f"{arguments.token_file} holds no token")
    if arguments.stdio and tokens:
        raise ValueError("bearer tokens apply to HTTP; a stdio server has one client, the process that started it")
    if not tokens and not arguments.stdio and os.environ.get(TOKEN_VARIABLE):
        tokens = [os.environ[TOKEN_VARIABLE]]
    return tokens


def exposure_warning(host: str, *, authenticated: bool) -> str | None:
    """What ``tarry mcp serve`` says when ``host`` lets other machines in (``None``: it does not)."""
    if loopback(host):
        return None
    said = f"Warning: serving MCP over plain HTTP on {host}, reachable from the network: "
    if authenticated:
        said += "the bearer tokens and every tool call travel unencrypted. "
    else:
        said += (
            "anyone who reaches it can call the tools, as no bearer token is required "
            f"(give --token-file, or set {TOKEN_VARIABLE}). "
        )
    return said + "Serve it behind an HTTPS reverse proxy, or on 127.0.0.1."


def allowed_hosts(host: str, port: int, extra: list[str]) -> list[str]:
    """The ``Host`` headers a request may carry: loopback's, the bound address's (unless every interface), ``extra``."""
    allowed = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    if not loopback(host) and not wildcard(host):
        shown = f"[{host.strip('[]')}]" if ":" in host else host
        allowed.append(f"{shown}:{port}")
    return allowed + extra


def _positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (0 < seconds < math.inf):
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return seconds


def run(arguments: argparse.Namespace) -> int:
    """Serve until interrupted (HTTP) or until the client leaves (stdio)."""
    import asyncio

    from tarry.mcp_server import serve, serve_stdio, served_tools
    from tarry.mcp_server.tokens import BearerTokens
    from tarry.store import Store

    tools = load_tools(arguments.tools)
    options: dict[str, Any] = {
        "name": arguments.name,
        "approvals": arguments.approvals,
        "task_required": arguments.task_required,
        "ask_before_task": arguments.ask_before_task,
    }
    try:
        names = set(served_tools(tools))
    except (TypeError, ValueError) as error:
        print(f"tarry mcp serve: --tools {arguments.tools}: {error}", file=sys.stderr)
        return 2
    for option in ("task_required", "ask_before_task"):
        unknown = [name for name in options[option] if name not in names]
        if unknown:
            flag = option.replace("_", "-")
            print(f"tarry mcp serve: --{flag} {unknown[0]}: --tools {arguments.tools} has no tool of that name",
                  file=sys.stderr)  # fmt: skip
            return 2
    try:
        tokens = tokens_of(arguments)
        verifier = BearerTokens(tokens) if tokens else None
    except (ValueError, OSError) as error:
        print(f"tarry mcp serve: {error}", file=sys.stderr)
        return 2
    limits = {"max_sessions": arguments.max_sessions, "session_idle_timeout": arguments.session_idle_timeout}
    limits = {name: value for name, value in limits.items() if value is not None}  # else serve()'s defaults

    async def main() -> None:
        async with Store(arguments.url, lease=arguments.lease) as store:
            await store.setup()
            if arguments.stdio:
                await serve_stdio(tools, store, **options)
                return
            import uvicorn

            sock = socket.socket(socket.AF_INET6 if ":" in arguments.host else socket.AF_INET)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((arguments.host, arguments.port))
            sock.listen(2048)
            port = sock.getsockname()[1]
            app = serve(
                tools,
                store,
                stream_hold=arguments.stream_hold,
                auth=verifier.auth() if verifier is not None else None,
                token_verifier=verifier,
                allowed_hosts=allowed_hosts(arguments.host, port, arguments.allowed_host),
                **options,
                **limits,
            )
            print(f"tarry MCP server on http://{arguments.host}:{port}/mcp", file=sys.stderr, flush=True)
            warning = exposure_warning(arguments.host, authenticated=verifier is not None)
            if warning:
                print(warning, file=sys.stderr, flush=True)
            config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=3)
            await uvicorn.Server(config).serve(sockets=[sock])

    asyncio.run(main())
    return 0
