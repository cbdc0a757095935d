"""A click in the inbox reads its question once, then decides through ``Store.decide`` and shows what that returned."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import event

from tests.web.client import AUTH, Inbox
from tests.web.tools import call, park, pending, question


@contextmanager
def inbox_reads(inbox: Inbox) -> Iterator[list[str]]:
    """The statements by which the inbox reads a question while the block runs: the ones that select from the
    questions' table and leave out the call's claim (which a decision's own read, under the row lock, reads too)."""
    reads: list[str] = []

    def note(connection: Any, cursor: Any, statement: str, *rest: Any) -> None:
        selects = statement.lstrip().startswith("SELECT") and "FROM tarry_questions" in statement
        if selects and "claimed_until" not in statement:
            reads.append(statement)

    engine = inbox.store.db.sync_engine
    event.listen(engine, "before_cursor_execute", note)
    try:
        yield reads
    finally:
        event.remove(engine, "before_cursor_execute", note)


def test_a_click_reads_its_question_once_and_shows_the_decision_store_decide_returned(any_database: str) -> None:
    inbox = Inbox(any_database)
    with inbox.client:
        chat = park(any_database, call("refund", order="A1", amount=1), call("refund", order="A2", amount=2))
        first, second = pending(any_database, chat)
        with inbox_reads(inbox) as reads:
            approved = inbox.client.post(f"/api/questions/{first.id}/approve", headers=AUTH)
        assert approved.status_code == 200, approved.text
        assert len(reads) == 1, reads
        assert approved.json()["question"]["decision"] == "accept"
        recorded = question(any_database, first.id).decided_at
        assert datetime.fromisoformat(approved.json()["question"]["decided_at"]) == recorded
        with inbox_reads(inbox) as reads:
            declined = inbox.client.post(f"/api/questions/{second.id}/decline", json={"note": "no"}, headers=AUTH)
        assert declined.status_code == 200, declined.text
        assert len(reads) == 1, reads
        assert declined.json()["question"]["note"] == "no"
        assert [decided.id for decided in inbox.answered] == [first.id, second.id]
        # Another decision came first: the inbox reads the question again to show it.
        with inbox_reads(inbox) as reads:
            again = inbox.client.post(f"/api/questions/{first.id}/decline", headers=AUTH)
        assert again.status_code == 409, again.text
        assert len(reads) == 2, reads
        inbox.client.portal.call(inbox.store.close)  # type: ignore[union-attr]
