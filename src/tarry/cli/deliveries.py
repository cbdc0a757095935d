"""``tarry deliveries``: list the deliveries of notices (their state, attempts and last error), or retry one."""

from __future__ import annotations

import argparse
from typing import Any

from tarry.cli.exits import Exit
from tarry.cli.output import print_json, print_listing
from tarry.store import DeliveryRecord, Store


def delivery_line(delivery: DeliveryRecord) -> str:
    """One delivery in a line: id, state, attempts, event, question, channel, recipient and last error."""
    whom = "" if delivery.recipient is None else f" to {delivery.recipient.label}"
    line = (
        f"{delivery.id}  {delivery.state} ({delivery.attempts} attempt{'s' * (delivery.attempts != 1)})  "
        f"{delivery.event} {delivery.question_id} via {delivery.channel}{whom}"
    )
    if delivery.state == "pending" and delivery.attempts:
        line += f", next at {delivery.next_attempt_at:%Y-%m-%d %H:%M:%S} UTC"
    if delivery.last_error is not None and delivery.state != "sent":
        line += f": {delivery.last_error}"
    return line


async def deliveries(store: Store, arguments: argparse.Namespace) -> int:
    """``tarry deliveries``: list them (newest first), or with ``--retry ID`` make one due now."""
    if arguments.retry is not None:
        retried = await store.retry_delivery(arguments.retry)
        if arguments.json:
            print_json(retried.to_dict())
        elif retried.state == "sent":
            print(f"Sent already: {delivery_line(retried)}")
        else:
            print(f"Due now: {delivery_line(retried)}")
        return Exit.OK
    listed = await store.deliveries(state=arguments.state, question_id=arguments.question, limit=arguments.limit)
    print_listing(listed, DeliveryRecord.to_dict, delivery_line, as_json=arguments.json, empty="No deliveries.")
    return Exit.OK


def add_parser(add: Any) -> argparse.ArgumentParser:
    """Add ``tarry deliveries`` with ``add(name, help, description)``; returns its parser."""
    parser: argparse.ArgumentParser = add(
        "deliveries",
        "list the deliveries of notices (webhooks, emails, messages): state, attempts, last error; retry one",
        "List the deliveries of notices of questions asked, decided, expired or cancelled, newest first: each "
        "one's state (pending, sent, failed), attempts and last error. `--retry ID` makes a failed delivery due "
        "now with a fresh count of attempts; a running notifier sends it.",
    )
    parser.add_argument("--state", choices=("pending", "sent", "failed"), help="only deliveries in this state")
    parser.add_argument("--question", metavar="QUESTION_ID", help="only this question's deliveries")
    parser.add_argument("--limit", type=int, default=100, metavar="N", help="at most N deliveries (default 100)")
    parser.add_argument("--retry", metavar="DELIVERY_ID", help="make this delivery due now instead of listing")
    parser.add_argument("--json", action="store_true", help="print JSON")
    return parser
