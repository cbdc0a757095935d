"""``tarry mcp serve``: tarry tools as an MCP server, over streamable HTTP or stdio."""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Callable
from typing import Any

from tarry.agents import Agent
from tarry.specs import SpecError, load_spec
from tarry.tools import Tool

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
    serve.set_defaults(handler=handler)


def run(arguments: argparse.Namespace) -> int:
    """Serve until interrupted (HTTP) or until the client leaves (stdio)."""
    import asyncio

    from tarry.mcp.serving import serve, serve_stdio
    from tarry.store import Store

    tools = load_tools(arguments.tools)
    options: dict[str, Any] = {"name": arguments.name, "approvals": arguments.approvals}

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
            app = serve(tools, store, stream_hold=arguments.stream_hold, **options)
            print(
                f"tarry MCP server on http://{arguments.host}:{sock.getsockname()[1]}/mcp", file=sys.stderr, flush=True
            )
            config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=3)
            await uvicorn.Server(config).serve(sockets=[sock])

    asyncio.run(main())
    return 0
