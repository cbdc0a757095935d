"""The inbox's "Approve all in this conversation" in Debian's Chromium against a live uvicorn server."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from playwright.sync_api import expect
from sqlalchemy import update

from tarry.clock import utcnow
from tarry.store import Store
from tarry.store.tables import questions
from tests.web.conftest import screenshot
from tests.web.server import LiveServer
from tests.web.tools import call, park, pending, question, run


def refund(order: str) -> dict[str, Any]:
    return call("refund", order=order, amount=1)


def history(url: str, chat_id: str) -> list[Any]:
    async def read() -> list[Any]:
        async with Store(url) as store:
            return await store.history(chat_id)

    return run(read)


def test_approve_all_records_every_call_of_the_conversation_at_once(page: Any, live: LiveServer) -> None:
    chat = park(live.url, refund("A1"), refund("A2"), refund("A3"))
    other = park(live.url, refund("B1"), refund("B2"))
    waiting = sorted(asked.id for asked in pending(live.url, chat))
    page.goto(f"{live.base}/?chat={chat}")
    form = page.locator("#approve-all")
    expect(form).to_contain_text("All 3 calls of this conversation")
    screenshot(page, "approve-all")

    form.get_by_role("button", name="Approve all in this conversation").click()

    expect(page.locator('[data-outcome="all-approved"]')).to_contain_text("Approved every call")
    expect(page.locator("[data-question]")).to_have_count(0)
    expect(page.locator("#approve-all")).to_have_count(0)
    assert [question(live.url, question_id).decision for question_id in waiting] == ["accept"] * 3
    assert sorted(answered.id for answered in live.answered) == waiting
    assert [event.outcome for event in history(live.url, chat)] == ["decided"] * 3
    assert len(pending(live.url, other)) == 2, "another chat's calls are left alone"


def test_one_question_that_cannot_be_approved_is_named_and_nothing_is_recorded(page: Any, live: LiveServer) -> None:
    chat = park(live.url, refund("A1"), refund("A2"), refund("A3"))
    waiting = pending(live.url, chat)
    lapsed = waiting[1]
    page.goto(f"{live.base}/?chat={chat}")
    expect(page.locator("#approve-all")).to_be_visible()

    async def expire() -> None:  # it lapses while the page is open
        async with Store(live.url) as store:
            past = utcnow() - timedelta(minutes=1)
            change = update(questions).where(questions.c.id == lapsed.id).values(expires_at=past)
            await store.db.run_write(lambda connection: connection.execute(change))

    run(expire)
    page.get_by_role("button", name="Approve all in this conversation").click()

    notice = page.locator('[data-outcome="all-expired"]')
    expect(notice).to_contain_text("Nothing was approved")
    expect(notice.locator(".about")).to_contain_text("refund")
    assert lapsed.message in notice.inner_text()
    screenshot(page, "approve-all-stopped")
    assert [question(live.url, asked.id).decision for asked in waiting] == [None] * 3
    assert history(live.url, chat) == [] and live.answered == []


def test_the_form_is_offered_only_for_more_than_one_approval_all_of_them_approvable(
    page: Any, live: LiveServer
) -> None:
    alone = park(live.url, refund("A1"))
    mixed = park(live.url, refund("B1"), call("book_table", restaurant="Roma"))
    pair = park(live.url, refund("C1"), refund("C2"))
    for chat in (alone, mixed):
        page.goto(f"{live.base}/?chat={chat}")
        expect(page.locator("[data-question]").first).to_be_visible()
        expect(page.locator("#approve-all")).to_have_count(0)
    page.goto(f"{live.base}/")
    expect(page.locator("#approve-all")).to_have_count(0)  # the whole inbox: no one conversation
    page.goto(f"{live.base}/?chat={pair}")
    expect(page.locator("#approve-all")).to_contain_text("All 2 calls")
