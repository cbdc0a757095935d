"""The ``tarry`` command."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
Command = Callable[[argparse.Namespace], int]


def _demo(arguments: argparse.Namespace) -> int:
    from tarry import demo

    return demo.run(arguments.url)


def _worker(arguments: argparse.Namespace) -> int:
    from tarry.jobs.command import main
    from tarry.store import Store

    async def check() -> None:  # refuse to start on a database the worker cannot use
        async with Store(arguments.url) as store:
            await store.check()

    _store_run(check())
    return main(arguments.url, arguments.agents, arguments.concurrency, arguments.lease)


def _db_upgrade(arguments: argparse.Namespace) -> int:
    from tarry.store import Store

    async def upgrade() -> str:
        async with Store(arguments.url) as store:
            await store.setup()
            return store.url

    where = _store_run(upgrade())
    print(f"The database at {where} has the current schema.")
    return 0


def _db_check(arguments: argparse.Namespace) -> int:
    from tarry.store import Store
    from tarry.store.problems import Problem

    async def check() -> tuple[str, list[Problem]]:
        async with Store(arguments.url) as store:
            await store.check()
            return store.url, await store.problems()

    where, problems = _store_run(check())
    print(f"The database at {where} has the current schema.")
    for problem in problems:
        print(f"Corrupt: chat {problem.chat_id}, call {problem.call_id}: {problem.detail}")
    print(
        f"{len(problems)} open call(s) cannot be read: listings leave them out, loading their chats fails."
        if problems
        else "Every open call can be read."
    )
    return 1 if problems else 0


def _serve(arguments: argparse.Namespace) -> int:
    from tarry.web.serve import serve

    def say(line: str) -> None:
        print(line, flush=True)

    with contextlib.suppress(KeyboardInterrupt):  # serve() sets the schema up, or refuses, before the login link
        _store_run(serve(arguments.url, host=arguments.host, port=arguments.port, say=say))
    return 0


def _store_run(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work``; a database error prints what to do, without a traceback, and exits with status 1."""
    from tarry.errors import StoreError

    try:
        return asyncio.run(work)
    except StoreError as error:
        print(f"tarry: {error}", file=sys.stderr)
        raise SystemExit(1) from None


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
    check = database_commands.add_parser(
        "check",
        help="check the schema and look for stored records that cannot be read",
        description=(
            "Check that the database has the schema this tarry uses, and list the open tool calls whose saved "
            "records cannot be read (tampered JSON, a bad question schema, an unknown task status). "
            "Exits 1 when it finds any, or when the database cannot be used."
        ),
    )
    check.add_argument("--url", help="database URL (default: TARRY_DATABASE_URL, else sqlite:///tarry.db)")
    check.set_defaults(handler=_db_check)
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
