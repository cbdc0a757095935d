"""An email's one-click links, followed in Debian's Chromium against a live inbox and a real SMTP server.

Opening a link decides nothing; the page's form decides once, as the link's person, through the channel
``email``; the same link confirmed from 8 processes at once records one decision (SQLite and PostgreSQL).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tarry import Principal, Question
from tarry.mail import EmailSender, LinkSigner
from tarry.notices import Delivery
from tarry.store import Store
from tarry.testing import advance_clock
from tests.mail.mailbox import ROOT, Mailbox, links
from tests.web.conftest import screenshot
from tests.web.server import LiveServer
from tests.web.tools import call, park, pending, question, run, setup

SECRET = "a-link-secret-for-the-mail-tests"
ADA = Principal("u-ada", "Ada Lovelace")
CLICKERS = 8


@pytest.fixture
def served(any_database: str) -> Iterator[LiveServer]:
    """The inbox with signed links, on SQLite, then on PostgreSQL."""
    with LiveServer(any_database, link_secret=SECRET) as server:
        yield server


@pytest.fixture
def live(database_url: str) -> Iterator[LiveServer]:
    """The inbox with signed links, on a SQLite file."""
    setup(database_url)
    with LiveServer(database_url, link_secret=SECRET) as server:
        yield server


@pytest.fixture
def page(context: Any) -> Any:
    """A page of a fresh browser profile: not logged in to the inbox (an email's reader need not be)."""
    return context.new_page()


def mailed(live: LiveServer, mailbox: Mailbox, asked: Question, to: Principal = ADA) -> dict[str, str]:
    """Send ``asked`` to ``to`` through EmailSender and the SMTP server; the links of the mail received."""
    before = mailbox.received()
    sender = EmailSender(
        "127.0.0.1", mailbox.port, sender="tarry@example.com", base_url=live.base, links=LinkSigner(SECRET)
    )
    delivery = Delivery(
        id=f"d-{asked.id}-{to.id}",
        event="asked",
        channel="email",
        question=asked,
        recipient=to,
        address=f"{to.id}@example.com",
        attempt=1,
        noticed_at=datetime.now(UTC),
    )
    run(lambda: sender.send(delivery))
    return links(mailbox.messages(before + 1)[-1])


def asked_of(live: LiveServer, *calls: dict[str, Any]) -> Question:
    [found] = pending(live.url, park(live.url, *calls))
    return found  # type: ignore[no-any-return]


def trail(url: str, question_id: str) -> list[Any]:
    async def read() -> list[Any]:
        async with Store(url) as store:
            return await store.history(question_id=question_id)

    return run(read)


def test_an_approve_link_shows_the_call_and_only_its_form_approves(
    page: Any, served: LiveServer, mailbox: Mailbox
) -> None:
    asked = asked_of(served, call("refund", order="A17", amount=30, reason="broken"))
    url = mailed(served, mailbox, asked)["Approve"]

    opened = page.goto(url)
    assert opened is not None and opened.status == 200
    expect(page.locator('[data-state="confirm"]')).to_be_visible()
    expect(page.locator(".call-name code")).to_have_text("refund")
    expect(page.locator(".arguments")).to_contain_text('"order": "A17"')
    expect(page.locator(".as")).to_contain_text("You are deciding as Ada Lovelace")
    screenshot(page, "email-link-confirm")
    page.reload()  # a scanner may open it any number of times
    assert question(served.url, asked.id).decision is None
    assert trail(served.url, asked.id) == []

    page.get_by_role("button", name="Approve").click()
    expect(page.locator('[data-outcome="recorded"]')).to_contain_text("Approved.")
    decided = question(served.url, asked.id)
    assert (decided.decision, decided.decided_by, decided.channel) == ("accept", ADA, "email")
    assert [answered.id for answered in served.answered] == [asked.id]

    page.goto(url)
    expect(page.locator('[data-state="decided"]')).to_contain_text("Ada Lovelace approved it through email")
    expect(page.get_by_role("button")).to_have_count(0)
    assert [event.outcome for event in trail(served.url, asked.id)] == ["decided"]


def test_a_link_confirmed_twice_records_nothing_new(page: Any, live: LiveServer, mailbox: Mailbox) -> None:
    asked = asked_of(live, call("refund", order="A18", amount=5))
    url = mailed(live, mailbox, asked)["Approve"]
    page.goto(url)
    second = page.context.new_page()
    second.goto(url)  # the same link, open in two tabs
    page.get_by_role("button", name="Approve").click()
    expect(page.locator('[data-outcome="recorded"]')).to_be_visible()
    with second.expect_response(url) as response:
        second.get_by_role("button", name="Approve").click()
    assert response.value.status == 409
    expect(second.locator('[data-outcome="decided"]')).to_contain_text(
        "already decided: Ada Lovelace approved it through email"
    )
    assert [event.outcome for event in trail(live.url, asked.id) if event.outcome == "decided"] == ["decided"]
    assert [answered.id for answered in live.answered] == [asked.id]


def test_a_decline_link_sends_the_note(page: Any, live: LiveServer, mailbox: Mailbox) -> None:
    asked = asked_of(live, call("refund", order="A19", amount=900))
    page.goto(mailed(live, mailbox, asked)["Decline"])
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    page.get_by_label("Note for the model").fill("Far too much; ask finance.")
    page.get_by_role("button", name="Decline").click()
    expect(page.locator('[data-outcome="recorded"]')).to_have_text("Declined.")
    decided = question(live.url, asked.id)
    assert (decided.decision, decided.note, decided.decided_by, decided.channel) == (
        "decline",
        "Far too much; ask finance.",
        ADA,
        "email",
    )


def test_a_form_question_is_answered_on_its_links_page(page: Any, live: LiveServer, mailbox: Mailbox) -> None:
    asked = asked_of(live, call("book_table", restaurant="Luigi's"))
    page.goto(mailed(live, mailbox, asked)["Answer"])
    expect(page.get_by_role("heading", name="How should I book Luigi's?")).to_be_visible()
    expect(page.get_by_label("Party size")).to_have_value("2")
    page.get_by_role("radio", name="20:00").check()
    page.get_by_label("Party size").fill("40")
    page.get_by_label("Email for the confirmation").fill("ada@example.com")
    page.get_by_role("button", name="Send answer").click()
    expect(page.locator('[data-field="party"] .error')).to_be_visible()  # 40 is above 12: shown again, unrecorded
    assert question(live.url, asked.id).decision is None

    page.get_by_label("Party size").fill("4")
    page.get_by_role("button", name="Send answer").click()
    expect(page.locator('[data-outcome="recorded"]')).to_have_text("Your answer was recorded.")
    decided = question(live.url, asked.id)
    assert decided.decision == "accept"
    assert decided.answer is not None
    assert (decided.answer["time"], decided.answer["party"], decided.answer["email"]) == ("20:00", 4, "ada@example.com")
    assert (decided.decided_by, decided.channel) == (ADA, "email")


def test_a_tampered_link_is_refused_and_says_why(page: Any, live: LiveServer, mailbox: Mailbox) -> None:
    asked = asked_of(live, call("refund", order="A20", amount=5))
    url = mailed(live, mailbox, asked)["Approve"]
    # The second-to-last character: a whole six bits of the signature (the last one's low bits are padding).
    tampered = url[:-2] + ("A" if url[-2] != "A" else "B") + url[-1]
    opened = page.goto(tampered)
    assert opened is not None and opened.status == 400
    expect(page.locator('[data-refused="tampered"] h1')).to_have_text("This link is not valid")
    expect(page.get_by_role("button")).to_have_count(0)
    assert httpx.post(tampered, data={"link_csrf": "x"}).status_code == 400
    assert question(live.url, asked.id).decision is None
    assert trail(live.url, asked.id) == []


def test_an_expired_link_is_refused_and_says_why(page: Any, live: LiveServer, mailbox: Mailbox) -> None:
    asked = asked_of(live, call("refund", order="A21", amount=5))
    url = mailed(live, mailbox, asked)["Approve"]
    page.goto(url)  # opened in time, confirmed too late
    advance_clock(8 * 24 * 3600)  # past the week a link lasts; the server runs in this process
    with page.expect_response(url) as response:
        page.get_by_role("button", name="Approve").click()
    assert response.value.status == 410
    expect(page.locator('[data-refused="expired"] h1')).to_have_text("This link has expired")
    assert page.goto(url).status == 410
    assert question(live.url, asked.id).decision is None
    assert trail(live.url, asked.id) == []


def test_a_post_without_the_pages_form_token_is_refused(live: LiveServer, mailbox: Mailbox) -> None:
    asked = asked_of(live, call("refund", order="A22", amount=5))
    url = mailed(live, mailbox, asked)["Approve"]
    with httpx.Client() as client:
        assert client.post(url).status_code == 403  # no page opened: no cookie, no token
        token = client.get(url).text.split('name="link_csrf" value="')[1].split('"')[0]
        client.cookies.clear()
        refused = client.post(url, data={"link_csrf": token})  # the token without its cookie
        assert refused.status_code == 403
        assert 'data-refused="csrf"' in refused.text
    assert question(live.url, asked.id).decision is None


def test_a_question_decided_elsewhere_shows_who_decided_it(page: Any, live: LiveServer, mailbox: Mailbox) -> None:
    asked = asked_of(live, call("refund", order="A23", amount=5))
    url = mailed(live, mailbox, asked)["Approve"]

    async def decline() -> None:
        async with Store(live.url) as store:
            await store.decide(asked.id, "decline", note="no", by=Principal("bo", "Bo"), channel="cli")

    run(decline)
    opened = page.goto(url)
    assert opened is not None and opened.status == 200
    expect(page.locator('[data-state="decided"]')).to_contain_text("Bo declined it through cli")
    expect(page.get_by_role("button")).to_have_count(0)


def test_one_link_confirmed_from_eight_processes_records_one_decision(
    served: LiveServer, mailbox: Mailbox, tmp_path: Path
) -> None:
    asked = asked_of(served, call("refund", order="A24", amount=5))
    url = mailed(served, mailbox, asked)["Approve"]
    signals = tmp_path / "signals"
    signals.mkdir()
    clickers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.mail.clicker", url, str(signals), str(number)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for number in range(CLICKERS)
    ]
    try:
        deadline = time.monotonic() + 60
        while len(list(signals.glob("ready-*"))) < CLICKERS:
            assert all(clicker.poll() is None for clicker in clickers), "a clicker ended before it was ready"
            assert time.monotonic() < deadline, "the clickers did not open the page within 60 s"
            time.sleep(0.02)
        assert question(served.url, asked.id).decision is None  # eight GETs decided nothing
        (signals / "go").write_text("")
        said = sorted(clicker.communicate(timeout=120)[0].strip() for clicker in clickers)
    finally:
        for clicker in clickers:
            if clicker.poll() is None:
                clicker.kill()
                clicker.wait()
    assert said == ["200 done"] + ["409 decided"] * (CLICKERS - 1)
    decided = question(served.url, asked.id)
    assert (decided.decision, decided.decided_by, decided.channel) == ("accept", ADA, "email")
    outcomes = [event.outcome for event in trail(served.url, asked.id)]
    assert outcomes.count("decided") == 1
    assert [answered.id for answered in served.answered] == [asked.id]
