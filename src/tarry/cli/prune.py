"""``tarry db prune``: remove the chats that finished before a date, and say what went and what the file weighs."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tarry.cli.arguments import positive_int

if TYPE_CHECKING:  # the store is imported when the command runs, not when its arguments are parsed
    from tarry.store.prune import PruneReport, Space

URL_HELP = "database URL (default: TARRY_DATABASE_URL, else sqlite:///tarry.db)"


def moment(text: str) -> datetime:
    """An argparse type: an ISO 8601 date or time; one without a time zone is UTC (a date alone: its midnight)."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 date or time, such as 2026-01-31 or 2026-01-31T12:00:00+01:00, got {text!r}"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def add_parser(database_commands: Any, handler: Any) -> None:
    """Add ``prune`` to ``tarry db``'s subcommands, run by ``handler``."""
    prune = database_commands.add_parser(
        "prune",
        help="remove finished and cancelled chats, with everything they own",
        description=(
            "Remove the chats that finished (or were cancelled) before --finished-before, with their messages, "
            "tool calls, questions and served MCP tasks, in short transactions that other processes' decisions "
            "and workers go between. A chat that still waits, works or is due is never touched. The audit trail "
            "of the removed chats is kept: it is append-only and tamper-evident (tarry history --jsonl sends it to "
            "a log system). On SQLite, the freed space goes back to the file system when the file has "
            "auto_vacuum=INCREMENTAL (new databases have it); --vacuum rewrites an older file once (VACUUM), "
            "which needs the database for itself."
        ),
    )
    prune.add_argument("--url", help=URL_HELP)
    prune.add_argument(
        "--finished-before",
        required=True,
        type=moment,
        metavar="DATE",
        help="an ISO 8601 date or time; without a time zone it is UTC",
    )
    prune.add_argument("--batch-size", type=positive_int, default=500, help="chats per transaction (default: 500)")
    prune.add_argument("--vacuum", action="store_true", help="SQLite: VACUUM the file afterwards")
    prune.set_defaults(handler=handler)


async def run(arguments: argparse.Namespace) -> list[str]:
    """Prune as ``arguments`` say; the lines to print."""
    from tarry.store import Store
    from tarry.store.prune import sqlite_space

    async with Store(arguments.url) as store:
        before = await sqlite_space(store)
        report = await store.prune(finished_before=arguments.finished_before, batch_size=arguments.batch_size)
        if arguments.vacuum:
            await store.vacuum()
        after = await sqlite_space(store)
        return report_lines(report, arguments, store.db.where) + space_lines(before, after, vacuumed=arguments.vacuum)


def report_lines(report: PruneReport, arguments: argparse.Namespace, where: str) -> list[str]:
    """What the prune removed, as lines."""
    from tarry.store.prune import ROW_NAMES

    owned = ", ".join(
        f"{report.rows.get(table, 0)} {name}" for table, name in ROW_NAMES.items() if table != "tarry_chats"
    )
    lines = [f"Removed {report.chats} chat(s) of {where} finished before {arguments.finished_before.isoformat()}."]
    if report.chats:
        lines.append(f"Rows removed: {owned}.")
    lines.append("Their audit trail is kept.")
    if report.skipped:
        lines.append(f"Kept {report.skipped} chat(s) that another process touched while the prune ran.")
    return lines


def space_lines(before: Space | None, after: Space | None, *, vacuumed: bool) -> list[str]:
    """The SQLite file's size before and after, and what to do about free pages left in it."""
    if before is None or after is None:
        return []
    lines = [f"Database file: {before.size} bytes before, {after.size} bytes after."]
    if after.free and not vacuumed:
        lines.append(
            f"{after.free} bytes of it are free pages that later writes reuse; "
            "`tarry db prune --vacuum` gives them back to the file system."
        )
    return lines
