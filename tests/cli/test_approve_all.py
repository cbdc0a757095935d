"""``tarry approve --chat ID --all``: a chat's whole turn approved from a shell, all or nothing.

Real processes and their exit codes, on a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import getpass
from datetime import timedelta
from typing import Any

from sqlalchemy import update

from tarry.cli.exits import Exit
from tarry.clock import utcnow
from tarry.demo import BookTable
from tarry.edits import arguments_digest
from tarry.store import Store
from tarry.store.tables import questions
from tarry.testing import ScriptedModel
from tests.cli.chat_agent import TransferMoney
from tests.cli.conftest import tarry


async def turn_of(store: Store, calls: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """A stored chat parked on ``calls``: its id and its open questions' ids, in the order of the calls."""
    model = ScriptedModel([calls, "Done."])
    chat = await store.create_chat(model, [TransferMoney(), BookTable()])
    await chat.ask("Pay them all.")
    return chat.id, [question.id for question in await store.pending_questions(chat.id)]


def pay(to: str) -> dict[str, Any]:
    return {"name": "transfer_money", "arguments": {"amount": 20, "to": to}}


async def test_approve_all_records_the_whole_turn_by_a_chat_id_prefix(store: Store, database_url: str) -> None:
    chat_id, ids = await turn_of(store, [pay("Bob"), pay("Dan"), pay("Eve")])
    done = await asyncio.to_thread(tarry, "approve", "--chat", chat_id[:8], "--all", "--url", database_url)
    assert done.returncode == Exit.OK, done.stderr
    for question_id in ids:
        assert f"question {question_id}." in done.stdout
    assert done.stdout.count("Recorded: approved (transfer_money(") == 3
    stored = [await store.question(question_id) for question_id in ids]
    assert {(question.decision, question.channel) for question in stored} == {("accept", "cli")}
    assert {question.decided_by.id for question in stored if question.decided_by} == {getpass.getuser()}
    assert [event.outcome for event in await store.history(chat_id)] == ["decided"] * 3
    again = await asyncio.to_thread(tarry, "approve", "--chat", chat_id, "--all", "--url", database_url)
    assert again.returncode == Exit.OK and "Nothing to approve" in again.stdout


async def test_one_question_that_cannot_be_approved_stops_the_turn_with_its_status(
    store: Store, database_url: str
) -> None:
    chat_id, ids = await turn_of(store, [pay("Bob"), pay("Dan"), pay("Eve")])
    lapsed = ids[1]
    past = utcnow() - timedelta(minutes=1)
    await store.db.run_write(
        lambda connection: connection.execute(update(questions).where(questions.c.id == lapsed).values(expires_at=past))
    )
    done = await asyncio.to_thread(tarry, "approve", "--chat", chat_id, "--all", "--url", database_url)
    assert done.returncode == Exit.EXPIRED, done.stderr
    assert f"question {lapsed} (transfer_money)" in done.stderr and "Nothing approved" in done.stderr
    assert [(await store.question(question_id)).decision for question_id in ids] == [None] * 3
    assert await store.history(chat_id) == []

    form_chat, form_ids = await turn_of(
        store, [pay("Bob"), {"name": "book_table", "arguments": {"restaurant": "Luigi's"}}]
    )
    form = await asyncio.to_thread(tarry, "approve", "--chat", form_chat, "--all", "--url", database_url)
    assert form.returncode == Exit.FAILED, form.stderr
    assert f"question {form_ids[1]} (book_table)" in form.stderr and "form" in form.stderr
    assert await store.history(form_chat) == []


async def test_approve_takes_a_question_or_a_chat_with_all_and_an_unknown_chat_exits_6(
    store: Store, database_url: str
) -> None:
    for arguments in (("--all",), ("--chat", "abc"), ("some-id", "--chat", "abc", "--all"), ()):
        done = await asyncio.to_thread(tarry, "approve", *arguments, "--url", database_url)
        assert done.returncode == Exit.USAGE, (arguments, done.stderr)
    unknown = await asyncio.to_thread(tarry, "approve", "--chat", "no-such-chat", "--all", "--url", database_url)
    assert unknown.returncode == Exit.UNKNOWN and "no-such-chat" in unknown.stderr


async def test_approve_all_with_seen_records_the_turn_only_as_shown(store: Store, database_url: str) -> None:
    chat_id, ids = await turn_of(store, [pay("Bob"), pay("Dan"), pay("Eve")])
    shown = {question_id: (await store.question(question_id)).proposal_digest for question_id in ids}
    pairs = [f"{question_id[:8]}={digest}" for question_id, digest in shown.items()]  # ids as prefixes

    def approve(*seen: str) -> Any:
        options = [option for pair in seen for option in ("--seen", pair)]
        return tarry("approve", "--chat", chat_id, "--all", *options, "--url", database_url)

    unseen = await asyncio.to_thread(approve, *pairs[:2])  # the third was asked after the listing was printed
    assert unseen.returncode == Exit.CHANGED, unseen.stderr
    assert f"question {ids[2]} (transfer_money)" in unseen.stderr and "not among the questions you saw" in unseen.stderr
    changed = arguments_digest({"amount": 5, "to": "Dan"})  # what a listing printed before the call was changed
    stale = await asyncio.to_thread(approve, pairs[0], f"{ids[1]}={changed}", pairs[2])
    assert stale.returncode == Exit.CHANGED, stale.stderr
    assert f"question {ids[1]} (transfer_money)" in stale.stderr and "changed since you saw them" in stale.stderr
    assert [(await store.question(question_id)).decision for question_id in ids] == [None] * 3
    assert await store.history(chat_id) == []

    done = await asyncio.to_thread(approve, *pairs)
    assert done.returncode == Exit.OK, done.stderr
    assert done.stdout.count("Recorded: approved (transfer_money(") == 3
    assert [(await store.question(question_id)).decision for question_id in ids] == ["accept"] * 3
