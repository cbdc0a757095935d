"""``POST /api/chats/{chat_id}/approve-all``: a chat's whole turn approved through the JSON API, all or nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update
from starlette.requests import Request

from tarry.clock import utcnow
from tarry.edits import arguments_digest
from tarry.questions import Question
from tarry.store import Store
from tarry.store.tables import questions
from tests.web.client import AUTH, Inbox, problem
from tests.web.tools import call, park, pending, question, run


@pytest.fixture
def inbox(any_inbox: Inbox) -> Inbox:
    """The inbox on SQLite, then PostgreSQL."""
    return any_inbox


def history(url: str, chat_id: str) -> list[Any]:
    async def read() -> list[Any]:
        async with Store(url) as store:
            return await store.history(chat_id)

    return run(read)


def refund(order: str) -> dict[str, Any]:
    return call("refund", order=order, amount=1)


def test_a_turn_of_three_approvals_is_recorded_in_one_go(inbox: Inbox) -> None:
    chat = park(inbox.url, refund("A1"), refund("A2"), refund("A3"))
    waiting = sorted(asked.id for asked in pending(inbox.url, chat))
    done = inbox.client.post(f"/api/chats/{chat}/approve-all", headers=AUTH)
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["recorded"] is True
    assert [item["id"] for item in body["questions"]] == waiting
    assert {(item["decision"], item["channel"]) for item in body["questions"]} == {("accept", "api")}
    assert sorted(decided.id for decided in inbox.answered) == waiting, "on_answer ran for each"
    assert sorted(inbox.hooked) == waiting, "the store's decision hooks ran for each"
    assert [event.outcome for event in history(inbox.url, chat)] == ["decided"] * 3
    again = inbox.client.post(f"/api/chats/{chat}/approve-all", headers=AUTH)
    assert again.status_code == 200 and again.json()["questions"] == []


def test_one_question_that_cannot_be_approved_is_named_and_nothing_is_recorded(inbox: Inbox) -> None:
    chat = park(inbox.url, refund("A1"), call("book_table", restaurant="Roma"), refund("A3"))
    waiting = pending(inbox.url, chat)
    form = next(asked for asked in waiting if asked.kind == "form")
    stopped = problem(inbox.client.post(f"/api/chats/{chat}/approve-all", headers=AUTH), 409)
    assert stopped["question_id"] == form.id and stopped["chat_id"] == chat
    assert "(book_table)" in stopped["detail"]
    assert [question(inbox.url, asked.id).decision for asked in waiting] == [None] * 3
    assert history(inbox.url, chat) == [] and inbox.answered == [] and inbox.hooked == []

    lapsing = park(inbox.url, refund("B1"), refund("B2"), refund("B3"))
    lapsed = pending(inbox.url, lapsing)[1]

    async def expire() -> None:
        async with Store(inbox.url) as store:
            past = utcnow() - timedelta(minutes=1)
            change = update(questions).where(questions.c.id == lapsed.id).values(expires_at=past)
            await store.db.run_write(lambda connection: connection.execute(change))

    run(expire)
    gone = problem(inbox.client.post(f"/api/chats/{lapsing}/approve-all", headers=AUTH), 410)
    assert gone["question_id"] == lapsed.id and "expired" in gone["detail"]
    assert history(inbox.url, lapsing) == []


def test_unknown_chats_logins_csrf_and_authorize_are_checked(any_database: str) -> None:
    chat = park(any_database, refund("A1"), refund("A2"))
    inbox = Inbox(any_database)
    with inbox.client as client:
        problem(client.post(f"/api/chats/{chat}/approve-all"), 401)
        problem(client.post("/api/chats/no-such-chat/approve-all", headers=AUTH), 404)
        client.get(f"/login?token={AUTH['Authorization'].split()[1]}")
        problem(client.post(f"/api/chats/{chat}/approve-all", data={"x": "y"}), 403)  # a cookie's plain form post
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]
    assert history(any_database, chat) == []

    [first, second] = pending(any_database, chat)
    asked_about: list[str | None] = []

    async def authorize(request: Request, asked: Any) -> bool:
        asked_about.append(getattr(asked, "id", None))
        return not isinstance(asked, Question) or asked.id != second.id  # the chat, but not its second question

    guarded = Inbox(any_database, authorize=authorize)
    with guarded.client as client:
        problem(client.post(f"/api/chats/{chat}/approve-all", json={}), 403)
        client.portal.call(guarded.store.close)  # type: ignore[union-attr]
    assert first.id in asked_about and second.id in asked_about
    assert history(any_database, chat) == []


def test_a_turn_with_seen_is_approved_only_as_shown(inbox: Inbox) -> None:
    chat = park(inbox.url, refund("A1"), refund("A2"), refund("A3"))
    waiting = sorted(pending(inbox.url, chat), key=lambda asked: asked.id)
    listed = inbox.client.get("/api/questions", params={"chat_id": chat}, headers=AUTH).json()
    shown = {item["id"]: item["proposal_digest"] for item in listed}
    url = f"/api/chats/{chat}/approve-all"

    changed = {**shown, waiting[1].id: arguments_digest({"order": "A2", "amount": 100})}
    stale = problem(inbox.client.post(url, json={"seen": changed}, headers=AUTH), 409)
    assert stale["question_id"] == waiting[1].id and "changed since you saw them" in stale["detail"]
    unseen = problem(inbox.client.post(url, json={"seen": dict(list(shown.items())[:2])}, headers=AUTH), 409)
    assert unseen["question_id"] not in list(shown)[:2] and "not among the questions you saw" in unseen["detail"]
    bad = problem(inbox.client.post(url, json={"seen": {waiting[0].id: "abc"}}, headers=AUTH), 400)
    assert "64 lowercase hexadecimal digits" in bad["detail"] and set(bad["errors"]) == {"seen"}
    stranger = problem(
        inbox.client.post(url, json={"seen": {**shown, "no-such-question": "a" * 64}}, headers=AUTH), 400
    )
    assert "not chat" in stranger["detail"] and "no-such-question" in stranger["detail"]
    assert [question(inbox.url, asked.id).decision for asked in waiting] == [None] * 3
    assert history(inbox.url, chat) == [] and inbox.answered == []

    done = inbox.client.post(url, json={"seen": shown}, headers=AUTH)
    assert done.status_code == 200, done.text
    assert [item["id"] for item in done.json()["questions"]] == [asked.id for asked in waiting]
