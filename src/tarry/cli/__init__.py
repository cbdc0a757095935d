"""The ``tarry`` command: demo, worker, db, serve, the terminal chat and the inbox commands."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import Any, TypeVar

from tarry.cli.arguments import identity_text, importable_working_directory, positive_int

T = TypeVar("T")
Command = Callable[[argparse.Namespace], int]
LINK_SECRET_VARIABLE = "TARRY_LINK_SECRET"
"""The environment variable holding the secret ``tarry serve`` checks emails' signed links with."""
URL_HELP = "database URL (default: TARRY_DATABASE_URL, else sqlite:///tarry.db)"


def _demo(arguments: argparse.Namespace) -> int:
    from tarry import demo

    return demo.run(arguments.url)


def _worker(arguments: argparse.Namespace) -> int:
    from tarry.cli.exits import fail, refuse_database
    from tarry.jobs.command import load_agents, main
    from tarry.specs import SpecError
    from tarry.store import Store

    importable_working_directory()
    try:
        agents = load_agents(arguments.agents)  # a bad --agents is one line, before the database is opened
    except SpecError as error:
        return fail(error)
    refused = refuse_database(arguments.url)
    if refused is not None:
        return refused

    async def check() -> None:  # refuse to start on a database the worker cannot use
        async with Store(arguments.url) as store:
            await store.check()

    _store_run(check())
    return main(arguments.url, agents, arguments.concurrency, arguments.lease, arguments.check_batch)


def _db_upgrade(arguments: argparse.Namespace) -> int:
    from tarry.cli.exits import refuse_database
    from tarry.store import Store

    refused = refuse_database(arguments.url, creates=True)
    if refused is not None:
        return refused

    async def upgrade() -> str:
        async with Store(arguments.url) as store:
            await store.setup()
            return store.url

    where = _store_run(upgrade())
    print(f"The database at {where} has the current schema.")
    return 0


def _db_check(arguments: argparse.Namespace) -> int:
    from tarry.cli.exits import Exit, refuse_database
    from tarry.errors import StoreError
    from tarry.store import Store
    from tarry.store.problems import Problem

    async def check() -> tuple[str, list[Problem]]:
        async with Store(arguments.url) as store:
            await store.check()
            return store.url, await store.problems()

    refused = refuse_database(arguments.url)  # a check creates no file
    if refused is not None:
        return refused
    try:
        where, problems = asyncio.run(check())
    except StoreError as error:  # unreachable, damaged, no schema, another revision, or parts of it missing
        print(f"tarry: {error}", file=sys.stderr)
        return int(Exit.DATABASE)
    print(f"The database at {where} has the current schema.")
    for problem in problems:
        print(f"Corrupt: chat {problem.chat_id}, call {problem.call_id}: {problem.detail}")
    print(
        f"{len(problems)} open call(s) cannot be read: listings leave them out, loading their chats fails."
        if problems
        else "Every open call can be read."
    )
    return 1 if problems else 0


def _db_prune(arguments: argparse.Namespace) -> int:
    from tarry.cli.exits import refuse_database
    from tarry.cli.prune import run

    refused = refuse_database(arguments.url)
    if refused is not None:
        return refused
    try:
        lines = _store_run(run(arguments))
    except (ValueError, TypeError) as error:  # a --finished-before ahead of now
        print(f"tarry: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def _serve(arguments: argparse.Namespace) -> int:
    from tarry.cli.exits import refuse_database
    from tarry.web.serve import serve

    refused = refuse_database(arguments.url, creates=True)
    if refused is not None:
        return refused

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        identity = _serve_identity(arguments)
    except (OSError, ValueError, TypeError, ImportError, AttributeError) as error:
        print(f"tarry: {error}", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):  # serve() sets the schema up, or refuses, before the login link
        hosts = arguments.allowed_host
        _store_run(
            serve(arguments.url, host=arguments.host, port=arguments.port, say=say, allowed_hosts=hosts, **identity)
        )
    return 0


def _serve_identity(arguments: argparse.Namespace) -> dict[str, Any]:
    """``serve()``'s ``users``, ``proxy`` and ``may_decide`` as ``tarry serve``'s options and environment say."""
    from tarry.approvals import check_may_decide
    from tarry.cli.identity import configured_may_decide
    from tarry.web.identity import ProxyIdentity, Users

    if arguments.trusted_proxy and not arguments.trust_identity_header:
        raise ValueError("--trusted-proxy goes with --trust-identity-header NAME")
    may_decide = configured_may_decide(arguments.may_decide)
    header = arguments.trust_identity_header
    return {
        "link_secret": os.environ.get(LINK_SECRET_VARIABLE) or None,
        "users": Users.load(arguments.users) if arguments.users else None,
        "proxy": ProxyIdentity.of(header, arguments.trusted_proxy) if header else None,
        "may_decide": check_may_decide(may_decide) if may_decide is not None else None,
    }


def _store_run(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work``; a database error prints what to do, without a traceback, and exits with status 7."""
    from tarry.cli.exits import Exit
    from tarry.errors import StoreError

    try:
        return asyncio.run(work)
    except StoreError as error:
        print(f"tarry: {error}", file=sys.stderr)
        raise SystemExit(Exit.DATABASE) from None


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
    worker.add_argument("--url", help=URL_HELP)
    worker.add_argument("--concurrency", type=int, default=16, help="chats carried on at once (default: 16)")
    worker.add_argument("--lease", type=float, default=60.0, help="seconds a claim lasts unrenewed (default: 60)")
    worker.add_argument(
        "--check-batch", type=int, default=256,
        help="due chats taken at a time to check their working tasks in a batch; 0: a full step each (default: 256)",
    )  # fmt: skip
    worker.set_defaults(handler=_worker)
    database = commands.add_parser("db", help="manage the database of stored chats")
    database_commands = database.add_subparsers(dest="db_command", required=True)
    upgrade = database_commands.add_parser(
        "upgrade",
        help="create the schema, or migrate it to the current version",
        description="Create tarry's tables, or migrate them to the current version (Alembic).",
    )
    upgrade.add_argument("--url", help=URL_HELP)
    upgrade.set_defaults(handler=_db_upgrade)
    check = database_commands.add_parser(
        "check",
        help="check the schema and look for stored records that cannot be read",
        description=(
            "Check that the database has the schema this tarry uses, with every table, column, index and unique "
            "constraint of it, and list the open tool calls whose saved records cannot be read (tampered JSON, a bad "
            "question schema, an unknown task status). Exits 7 when the database cannot be used (naming each part "
            "of the schema it lacks), 1 when some open calls cannot be read."
        ),
    )
    check.add_argument("--url", help=URL_HELP)
    check.set_defaults(handler=_db_check)
    from tarry.cli.prune import add_parser as add_prune

    add_prune(database_commands, _db_prune)
    serve = commands.add_parser(
        "serve",
        help="serve the web inbox and JSON API for what stored chats wait on",
        description="Serve the inbox page and JSON API with uvicorn; prints a login link holding a random token. "
        "With TARRY_LINK_SECRET set, it also serves the signed links of emails (tarry.mail) under /links/.",
    )
    serve.add_argument("--url", help=URL_HELP)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on; 0 picks a free one (default: 8000)")
    serve.add_argument(
        "--users", metavar="FILE",
        help="people's own login tokens: one 'ID SHA256_OF_TOKEN [NAME]' a line (no shared login link then)",
    )  # fmt: skip
    serve.add_argument(
        "--trust-identity-header", metavar="NAME",
        help="take who is asking from this header, set by an authenticating proxy (needs --trusted-proxy)",
    )  # fmt: skip
    serve.add_argument(
        "--trusted-proxy", action="append", default=[], metavar="ADDRESS",
        help="the proxy's address or network, the only one the identity header is taken from (repeatable)",
    )  # fmt: skip
    serve.add_argument(
        "--may-decide", metavar="MODULE:NAME",
        help="your app's may_decide(principal, question), for approvals whose policy names who may "
        "(default: the TARRY_MAY_DECIDE variable)",
    )  # fmt: skip
    serve.add_argument(
        "--allowed-host", action="append", default=[], metavar="NAME",
        help="a name the inbox is reached by, besides 127.0.0.1, localhost and --host (a proxy's public name; "
        "repeatable): a request naming any other Host is refused",
    )  # fmt: skip
    serve.set_defaults(handler=_serve)
    _add_chat(commands)
    _add_inbox(commands)
    _add_mcp(commands)
    return parser


EXIT_STATUSES = (
    "exit status: 0 recorded, 1 other error, 2 usage, 3 someone else decided first, 4 expired, "
    "5 invalid answer, 6 unknown id, 7 database unusable, 8 call running, 9 not allowed (see docs/cli.md)"
)


def _chat(arguments: argparse.Namespace) -> int:
    from tarry.cli.repl import main

    importable_working_directory()
    return main(arguments)


def _add_chat(commands: Any) -> None:
    chat = commands.add_parser(
        "chat",
        help="talk to a model in the terminal; tool calls that wait ask you inline",
        description=(
            "A terminal chat, stored in the database: replies stream, each tool call is shown, and a call "
            "that waits asks you inline (approve, answer, open a URL yourself, watch a task). Ctrl-C parks "
            "the chat and prints the command that resumes it."
        ),
    )
    chat.add_argument("--model", metavar="PROVIDER:MODEL", help="the model, e.g. openai:gpt-4.1-mini")
    chat.add_argument("--agent", metavar="MODULE:NAME", help="an Agent (its model, tools and instructions)")
    chat.add_argument("--url", help=URL_HELP)
    chat.add_argument(
        "--mcp", action="append", default=[], metavar="COMMAND_OR_URL",
        help="an MCP server whose tools join the chat: a command line, or an http(s) URL (repeatable)",
    )  # fmt: skip
    chat.add_argument("--resume", metavar="CHAT_ID", help="carry a stored chat on instead of starting one")
    chat.add_argument("--instructions", metavar="TEXT", help="the system instructions of a new chat")
    chat.add_argument(
        "--may-decide", metavar="MODULE:NAME",
        help="your app's may_decide(principal, question) for policies naming who may (else $TARRY_MAY_DECIDE)",
    )  # fmt: skip
    chat.add_argument(
        "--tool-choice", metavar="CHOICE",
        help="auto, none, required, or a tool's name the model must call first (a new chat; e.g. for small models)",
    )  # fmt: skip
    chat.add_argument(
        "--setting", action="append", default=[], metavar="NAME=VALUE",
        help="a model setting of a new chat, e.g. temperature=0.2 (VALUE read as JSON when it parses; repeatable)",
    )  # fmt: skip
    chat.set_defaults(handler=_chat)


def _mcp_serve(arguments: argparse.Namespace) -> int:
    from tarry.cli import mcp_serve
    from tarry.cli.exits import fail
    from tarry.specs import SpecError

    importable_working_directory()
    try:
        return mcp_serve.run(arguments)
    except SpecError as error:
        return fail(error)


def _add_mcp(commands: Any) -> None:
    from tarry.cli.mcp_serve import add_parser

    add_parser(commands, _mcp_serve)


def _inbox(name: str) -> Command:
    def handler(arguments: argparse.Namespace) -> int:
        from tarry.cli import inbox

        return inbox.run(getattr(inbox, name), arguments)

    return handler


def _add_inbox(commands: Any) -> None:
    def add(name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = commands.add_parser(
            name, help=help, description=description or help, epilog=EXIT_STATUSES
        )
        parser.add_argument("--url", help=URL_HELP)
        parser.set_defaults(handler=_inbox(name))
        return parser

    pending = add("pending", "list the questions that wait on a person (every chat's, or one chat's)")
    pending.add_argument("--chat", metavar="CHAT_ID", help="only this chat's questions")
    pending.add_argument("--json", action="store_true", help="print JSON (a list of questions)")
    pending.add_argument("--limit", type=positive_int, metavar="N", help="at most N questions (one page)")
    pending.add_argument("--cursor", help="the page after the one that printed this cursor")
    answer = add(
        "answer",
        "answer a question; with no value, an approval is approved",
        "Answer a question by id. VALUE answers a one-field question; --field NAME=VALUE answers fields by "
        "name (give a name twice for a field that takes several choices). Exit status 0 when recorded.",
    )
    answer.add_argument("question", metavar="QUESTION_ID")
    answer.add_argument("value", metavar="VALUE", nargs="?")
    answer.add_argument("--field", action="append", default=[], metavar="NAME=VALUE", help="a field's value")
    approve = add(
        "approve",
        "approve a question (a tool call waiting for approval), or with --chat ID --all a chat's whole turn",
        "Approve a question by id. With --chat CHAT_ID --all, approve every question the chat's waiting calls "
        "wait on, all in one transaction: if one of them cannot be approved, none is, and the error names it.",
    )
    approve.add_argument("question", metavar="QUESTION_ID", nargs="?")
    approve.add_argument("--chat", metavar="CHAT_ID", help="with --all: the chat whose waiting calls to approve")
    approve.add_argument(
        "--all", action="store_true", dest="whole_turn", help="approve all of the chat's waiting calls, or none"
    )
    approve.add_argument(
        "--set", action="append", default=[], dest="changes", metavar="NAME=VALUE",
        help="approve the call with this argument changed (VALUE is read as JSON when it parses, else as text); "
        "give it once per argument",
    )  # fmt: skip
    approve.add_argument(
        "--seen", metavar="DIGEST", action="append",
        help="approve only if the call's arguments are still those whose digest `tarry pending` or `tarry show` "
        "printed (exit 11, nothing recorded, when someone changed them since); with --chat CHAT_ID --all, give "
        "QUESTION_ID=DIGEST once per question shown: exit 11 when one changed or a question is not among them",
    )  # fmt: skip
    approve.set_defaults(check=partial(_check_approve, approve))
    decline = add("decline", "decline a question; the note reaches the model")
    decline.add_argument("question", metavar="QUESTION_ID")
    decline.add_argument("--note", help="why, for the model")
    respond = add(
        "respond",
        "answer a call's approval with its result, in the tool's place: the tool never runs",
        "Give the result of a call that waits for approval instead of running its tool; the model reads it as "
        "given by a person. RESULT is text, or with --json a JSON value. Exit status 0 when recorded.",
    )
    respond.add_argument("question", metavar="QUESTION_ID")
    respond.add_argument("result", metavar="RESULT")
    respond.add_argument("--json", action="store_true", dest="as_json", help="read RESULT as a JSON value")
    respond.add_argument(
        "--seen", metavar="DIGEST", action="append",
        help="respond only if the call's arguments are still those whose digest `tarry pending` or `tarry show` "
        "printed (exit 11, nothing recorded, when someone changed them since)",
    )  # fmt: skip
    respond.set_defaults(check=partial(_check_seen, respond))
    for deciding in (pending, answer, approve, decline, respond):
        deciding.add_argument(
            "--as", dest="by", metavar="IDENTITY", type=identity_text,
            help="who decides, for the audit trail (default: your OS user); a name nobody checked, so it never "
            "satisfies a policy that names who may or needs several people",
        )  # fmt: skip
        deciding.add_argument(
            "--may-decide", metavar="MODULE:NAME",
            help="your app's may_decide(principal, question) function, for approvals whose policy names who may "
            "(default: the TARRY_MAY_DECIDE variable)",
        )  # fmt: skip
    history = add("history", "list the audit trail: every attempt to decide a question, oldest first")
    history.add_argument("--chat", metavar="CHAT_ID", help="only this chat's decisions")
    history.add_argument("--question", metavar="QUESTION_ID", help="only this question's decisions")
    history.add_argument("--after", type=int, metavar="EVENT_ID", help="only events after this one")
    history.add_argument("--limit", type=int, metavar="N", help="at most N events")
    shown = history.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print JSON (a list of events)")
    shown.add_argument(
        "--jsonl", action="store_true",
        help="print one JSON object a line per event, with its place in the hash chain and its hash (for a log system)",
    )  # fmt: skip
    shown.add_argument(
        "--verify", action="store_true",
        help="check the trail's hash chain instead: exit 10 naming the first event changed, removed or inserted by "
        "anything but tarry",
    )  # fmt: skip
    chats = add("chats", "list the stored chats, oldest first")
    chats.add_argument("--waiting", action="store_true", help="only chats whose tool calls wait")
    chats.add_argument("--json", action="store_true", help="print JSON (a list of chats)")
    show = add("show", "print a chat's transcript and what it waits on")
    show.add_argument("chat_id", metavar="CHAT_ID")
    show.add_argument("--json", action="store_true", help="print JSON (the chat with its transcript)")
    tasks = add("tasks", "list the tasks that wait on work (every chat's, or one chat's)")
    tasks.add_argument("--chat", metavar="CHAT_ID", help="only this chat's tasks")
    tasks.add_argument("--json", action="store_true", help="print JSON (a list of tasks)")
    cancel = add(
        "cancel",
        "ask for a chat to be cancelled",
        "Ask whichever process carries the chat on (a worker, or a running `tarry chat`) to cancel its "
        "waiting calls. Exit status 0 when asked, 3 when it was asked already.",
    )
    cancel.add_argument("chat_id", metavar="CHAT_ID")
    from tarry.cli.grants import add_parser as add_grants

    add_grants(add).set_defaults(handler=_grants)
    from tarry.cli.deliveries import add_parser as add_deliveries

    add_deliveries(add).set_defaults(handler=_deliveries)


def _grants(arguments: argparse.Namespace) -> int:
    from tarry.cli import grants, inbox

    return inbox.run(grants.grants, arguments)


def _deliveries(arguments: argparse.Namespace) -> int:
    from tarry.cli import deliveries, inbox

    return inbox.run(deliveries.deliveries, arguments)


def _check_approve(parser: argparse.ArgumentParser, arguments: argparse.Namespace) -> None:
    """``tarry approve`` takes a question's id, or ``--chat ID --all``; anything else exits 2 saying so."""
    if arguments.whole_turn and arguments.question is not None:
        parser.error("give a QUESTION_ID or --chat CHAT_ID --all, not both")
    if arguments.whole_turn and not arguments.chat:
        parser.error("--all needs --chat CHAT_ID: the chat whose waiting calls to approve")
    if not arguments.whole_turn and arguments.chat:
        parser.error("--chat goes with --all (to approve one question, give its QUESTION_ID)")
    if not arguments.whole_turn and arguments.question is None:
        parser.error("give the QUESTION_ID to approve, or --chat CHAT_ID --all")
    if arguments.whole_turn and arguments.changes:
        parser.error("--set changes one call's arguments: give its QUESTION_ID, not --chat CHAT_ID --all")
    for pair in arguments.changes:
        if not pair.partition("=")[0] or "=" not in pair:
            parser.error(f"--set takes NAME=VALUE, got {pair!r}")
    if arguments.seen is not None:
        _check_seen(parser, arguments)


def _check_seen(parser: argparse.ArgumentParser, arguments: argparse.Namespace) -> None:
    """``--seen DIGEST`` takes one question's digest, as ``tarry pending`` prints it; ``tarry approve --chat ID --all``
    takes ``--seen QUESTION_ID=DIGEST`` once per question shown."""
    from tarry.decisions import check_seen  # the command line's own checks import nothing of tarry's at start

    given: list[str] = arguments.seen or []
    whole_turn = getattr(arguments, "whole_turn", False)
    if not whole_turn and len(given) > 1:
        parser.error("--seen is one question's digest: give it once (or QUESTION_ID=DIGEST each with --chat --all)")
    for entry in given:
        question, sep, digest = entry.partition("=") if whole_turn else ("-", "=", entry)
        if not question or not sep:
            parser.error(f"--seen with --chat CHAT_ID --all takes QUESTION_ID=DIGEST, got {entry!r}")
        try:
            check_seen(digest)
        except ValueError as error:
            parser.error(f"--seen: {error}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tarry`` with ``argv`` (default: the command line); returns the exit status."""
    parser = build_parser()
    arguments = parser.parse_args(argv)
    check: Callable[[argparse.Namespace], None] | None = getattr(arguments, "check", None)
    if check is not None:
        check(arguments)
    handler: Command | None = getattr(arguments, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return handler(arguments)
