"""Who was notified of a question, and when, on its card in the inbox, in Chromium: each delivery's event, channel,
recipient and state (sent when, or failed after how many attempts and why)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from playwright.sync_api import expect

from tarry import Principal, Question
from tarry.jobs.notifier import Notifier
from tarry.notices import Delivery
from tarry.store import Store
from tests.web.conftest import screenshot
from tests.web.server import LiveServer
from tests.web.tools import XSS, call, park, pending, run

ADA = Principal("u-ada", "Ada Lovelace")
BOB = Principal("u-bob", "Bob Babbage")


class Texts:
    """The application's own text-message channel: takes every message."""

    channel = "sms"

    def __init__(self) -> None:
        self.sent: list[Delivery] = []

    async def send(self, delivery: Delivery) -> None:
        self.sent.append(delivery)


class Down:
    """A webhook endpoint that is down, and answers with markup in its error."""

    channel = "hook"
    endpoint = True

    async def send(self, delivery: Delivery) -> None:
        raise ConnectionError(f"refused {XSS}")


class People:
    """Ada and Bob hear of every question; only Ada has a phone number."""

    def recipients(self, question: Question) -> Iterable[Principal]:
        return (ADA, BOB)

    def address(self, principal: Principal, channel: str) -> str | None:
        return "+44 20 7946 0000" if principal == ADA and channel == "sms" else None


def test_the_card_lists_who_was_notified_through_what_and_when(page: Any, live: LiveServer) -> None:
    [asked] = pending(live.url, park(live.url, call("refund", order="A17", amount=30)))
    texts = Texts()

    async def deliver() -> None:
        async with Store(live.url) as store:
            notifier = Notifier(store, [texts, Down()], People(), max_attempts=1)
            assert await notifier.deliver() == 2

    run(deliver)
    assert [delivery.recipient for delivery in texts.sent] == [ADA]

    page.goto(f"{live.base}/")
    card = page.locator(f'[data-question="{asked.id}"]')
    notified = card.locator(".notified")
    expect(notified.locator("summary")).to_have_text("Notified (2)")
    sent = notified.locator('[data-channel="sms"]')
    expect(sent).to_have_attribute("data-state", "sent")
    expect(sent).to_contain_text("Asked through sms to Ada Lovelace: sent")
    expect(sent.locator("time")).to_have_attribute("datetime", re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d"))
    failed = notified.locator('[data-channel="hook"]')
    expect(failed).to_have_attribute("data-state", "failed")
    expect(failed).to_contain_text("Asked through hook to its endpoint: failed after 1 attempt")
    expect(failed.locator(".error-text")).to_contain_text("ConnectionError: refused <script>")
    assert page.evaluate("window.__pwned === undefined")
    screenshot(page, "inbox-card-notified")


def test_a_card_without_deliveries_lists_none(page: Any, live: LiveServer) -> None:
    [asked] = pending(live.url, park(live.url, call("refund", order="A18", amount=5)))
    page.goto(f"{live.base}/")
    card = page.locator(f'[data-question="{asked.id}"]')
    expect(card.locator(".call-name")).to_be_visible()
    expect(card.locator(".notified")).to_have_count(0)
