"""The ``tarry`` command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Callable, Sequence

Command = Callable[[argparse.Namespace], int]


def _demo(arguments: argparse.Namespace) -> int:
    from tarry import demo

    return demo.run(arguments.url)


def _worker(arguments: argparse.Namespace) -> int:
    from tarry.jobs.command import main

    return main(arguments.url, arguments.agents, arguments.concurrency, arguments.lease)


def _db_upgrade(arguments: argparse.Namespace) -> int:
    from tarry.store import Store

    async def upgrade() -> str:
        async with Store(arguments.url) as store:
            await store.setup()
            return store.url

    print(f"The database at {asyncio.run(upgrade())} has the current schema.")
    return 0


def _serve(arguments: argparse.Namespace) -> int:
    from tarry.web.serve import serve

    def say(line: str) -> None:
        print(line, flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(arguments.url, host=arguments.host, port=arguments.port, say=say))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``tarry`` and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="tarry",
        description="LLM chats whose tool calls can wait: for approvals, answers and work that finishes later.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run a chat whose calls wait on an approval, a question and a task, across three processes",
        description=(
            "Run one scripted chat (no network, no keys) on a SQLite file: one process runs it until it parks, "
            "a second answers what waits from the database, a third carries it on to the final reply."
        ),
    )
    demo.add_argument("--url", help="database URL to use (default: a SQLite file in a new temporary folder)")
    demo.set_defaults(handler=_demo)
    worker = commands.add_parser(
        "worker",
        help="carry stored chats on in the background: task checks, decisions, expiries, cancellations",
        description="Run the embedded worker for the given agents until SIGTERM, which lets the current steps finish.",
    )
    worker.add_argument(
        "--agents", action="append", required=True, metavar="MODULE:NAME",
        help="an Agent, a list of agents, or a function returning them (repeatable)",
    )  # fmt: skip
    worker.add_argument("--url", help="database URL (default: TARRY_DATABASE_URL, else sqlite:///tarry.db)")
    worker.add_argument("--concurrency", type=int, default=16, help="chats carried on at once (default: 16)")
    worker.add_argument("--lease", type=float, default=60.0, help="seconds a claim lasts unrenewed (default: 60)")
    worker.set_defaults(handler=_worker)
    database = commands.add_parser("db", help="manage the database of stored chats")
    database_commands = database.add_subparsers(dest="db_command", required=True)
    upgrade = database_commands.add_parser(
        "upgrade",
        help="create the schema, or migrate it to the current version",
        description="Create tarry's tables, or migrate them to the current version (Alembic).",
    )
    upgrade.add_argument("--url", help="database URL (default: TARRY_DATABASE_URL, else sqlite:///tarry.db)")
    upgrade.set_defaults(handler=_db_upgrade)
    serve = commands.add_parser(
        "serve",
        help="serve the web inbox and JSON API for what stored chats wait on",
        description="Serve the inbox page and JSON API with uvicorn; prints a login link holding a random token.",
    )
    serve.add_argument("--url", help="database URL (default: TARRY_DATABASE_URL, else sqlite:///tarry.db)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on; 0 picks a free one (default: 8000)")
    serve.set_defaults(handler=_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tarry`` with ``argv`` (default: the command line); returns the exit status."""
    parser = build_parser()
    arguments = parser.parse_args(argv)
    handler: Command | None = getattr(arguments, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return handler(arguments)


if __name__ == "__main__":
    raise SystemExit(main())
