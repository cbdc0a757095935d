"""``tarry grants``: list, add and revoke standing grants, as the OS user running the command."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tarry.cli.arguments import json_pairs
from tarry.cli.exits import Exit
from tarry.cli.identity import os_user
from tarry.cli.output import print_json, print_listing
from tarry.grants import Constraint, Equal, Grant
from tarry.store import Store


def within_bounds(pairs: list[str]) -> dict[str, tuple[float | None, float | None]]:
    """``--within NAME=MIN..MAX`` options (either end may be left out: ``amount=..100``)."""
    bounds: dict[str, tuple[float | None, float | None]] = {}
    for pair in pairs:
        name, sep, span = pair.partition("=")
        low, dots, high = span.partition("..")
        if not sep or not name or not dots:
            raise ValueError(f"--within takes NAME=MIN..MAX, got {pair!r}")
        try:
            bounds[name] = (float(low) if low else None, float(high) if high else None)
        except ValueError:
            raise ValueError(f"--within takes numbers as bounds, got {pair!r}") from None
    return bounds


def grant_line(grant: Grant) -> str:
    """One grant in a line: its id, tool, scope, constraints, who granted it and until when."""
    constraints = [_constraint_text(constraint) for constraint in grant.constraints]
    if grant.revoked_at is not None:
        ends = f"revoked {grant.revoked_at:%Y-%m-%d %H:%M:%S} UTC"
    elif grant.expires_at is not None:
        ends = f"until {grant.expires_at:%Y-%m-%d %H:%M:%S} UTC"
    else:
        ends = "until revoked"
    where = ", ".join(constraints) if constraints else "any arguments"
    return f"{grant.id}  {grant.tool} ({where}), {grant.scope}, by {grant.granted_by.label}, {ends}"


def _constraint_text(constraint: Constraint) -> str:
    if isinstance(constraint, Equal):
        return f"{constraint.name}={json.dumps(constraint.value)}"
    low = "" if constraint.min is None else f"{constraint.min:g}"
    high = "" if constraint.max is None else f"{constraint.max:g}"
    return f"{constraint.name}={low}..{high}"


async def grants(store: Store, arguments: argparse.Namespace) -> int:
    """``tarry grants``: list the standing grants, or add one (``add``), or revoke one (``revoke``)."""
    if arguments.grants_command == "add":
        return await _add(store, arguments)
    if arguments.grants_command == "revoke":
        revoked = await store.revoke_grant(arguments.grant_id, by=os_user())
        print(f"Revoked: grant {revoked.id} of {revoked.tool} calls approves nothing from now on.")
        return Exit.OK
    listed = await store.grants(include_ended=arguments.all)
    print_listing(listed, Grant.to_dict, grant_line, as_json=arguments.json, empty="No standing grants.")
    return Exit.OK


async def _add(store: Store, arguments: argparse.Namespace) -> int:
    try:
        made = await store.grant(
            arguments.tool,
            by=os_user(),
            chat_id=arguments.chat,
            agent=arguments.agent,
            equal=json_pairs(arguments.equal, "--equal"),
            within=within_bounds(arguments.within),
            ttl=arguments.ttl,
        )
    except ValueError as error:  # what the command line gave: a bad constraint, scope or time
        print(f"tarry: {error}", file=sys.stderr)
        return Exit.USAGE
    if arguments.json:
        print_json(made.to_dict())
    else:
        print(f"Granted: {grant_line(made)}")
    return Exit.OK


def add_parser(add: Any) -> argparse.ArgumentParser:
    """Add ``tarry grants`` and its ``add`` and ``revoke`` with ``add(name, help, description)``, which makes a
    command's parser; returns the parser of ``tarry grants``."""
    parser: argparse.ArgumentParser = add(
        "grants",
        "list standing grants ('always allow'); add or revoke one",
        "List the standing grants that apply now (--all: revoked and expired ones too). `tarry grants add TOOL` "
        "approves that tool's calls at once, as you (your OS user), within the scope and constraints given; "
        "`tarry grants revoke GRANT_ID` ends one.",
    )
    parser.add_argument("--all", action="store_true", help="also revoked and expired grants")
    parser.add_argument("--json", action="store_true", help="print JSON")
    commands = parser.add_subparsers(dest="grants_command", metavar="add|revoke")
    made = commands.add_parser("add", help="grant a tool's calls standing approval, as your OS user")
    made.add_argument("tool", metavar="TOOL")
    scope = made.add_mutually_exclusive_group()
    scope.add_argument("--chat", metavar="CHAT_ID", help="only this chat's calls (default: every chat's)")
    scope.add_argument("--agent", metavar="NAME", help="only the calls of chats made from this agent")
    made.add_argument(
        "--equal", action="append", default=[], metavar="NAME=VALUE",
        help="the argument must equal VALUE (read as JSON when it is JSON, else as text)",
    )  # fmt: skip
    made.add_argument(
        "--within", action="append", default=[], metavar="NAME=MIN..MAX",
        help="the argument must be a number within the bounds (an end may be left out)",
    )  # fmt: skip
    made.add_argument("--for", dest="ttl", type=float, metavar="SECONDS", help="the grant ends after SECONDS")
    made.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the grant as JSON")
    revoked = commands.add_parser("revoke", help="revoke a standing grant")
    revoked.add_argument("grant_id", metavar="GRANT_ID")
    for sub in (made, revoked):  # also after the subcommand; SUPPRESS keeps a --url given before it
        sub.add_argument("--url", default=argparse.SUPPRESS, help="database URL (as for tarry grants)")
    return parser
