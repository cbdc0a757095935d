"""The inbox's form for approving a call with changed arguments, in Debian's Chromium against a live uvicorn server."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tests.web.conftest import screenshot
from tests.web.server import LiveServer
from tests.web.tools import call, park, pending, question


def test_an_approval_offers_the_tools_parameters_and_records_the_changed_arguments(page: Any, live: LiveServer) -> None:
    chat = park(live.url, call("refund", order="A1", amount=30))
    [asked] = pending(live.url, chat)
    page.goto(f"{live.base}/?chat={chat}")
    card = page.locator(f'[data-question="{asked.id}"]')
    form = card.locator("fieldset.edit-arguments")
    expect(form.locator("[data-argument]")).to_have_count(3)
    amount = form.get_by_label("amount")
    expect(amount).to_have_value("30")
    expect(form.get_by_label("order")).to_have_value("A1")

    amount.fill("thirty")
    card.get_by_role("button", name="Approve").click()
    card = page.locator(f'[data-question="{asked.id}"]')
    expect(card.locator('[data-argument="amount"] .error')).to_have_text("'thirty' is not of type 'integer'")
    expect(card.get_by_label("amount")).to_have_value("thirty")
    assert question(live.url, asked.id).decision is None

    card.get_by_label("amount").fill("3")
    card.get_by_label("reason").fill("damaged")
    screenshot(page, "approve-with-changes")
    card.get_by_role("button", name="Approve").click()

    expect(page.locator('[data-outcome="approved"]')).to_contain_text("Approved")
    decided = question(live.url, asked.id)
    assert decided.decision == "accept"
    assert decided.answer == {"arguments": {"order": "A1", "amount": 3, "reason": "damaged"}}


def test_an_approval_left_as_it_is_records_no_change(page: Any, live: LiveServer) -> None:
    chat = park(live.url, call("refund", order="A1", amount=30))
    [asked] = pending(live.url, chat)
    page.goto(f"{live.base}/?chat={chat}")
    page.locator(f'[data-question="{asked.id}"]').get_by_role("button", name="Approve").click()
    expect(page.locator('[data-outcome="approved"]')).to_contain_text("Approved")
    assert question(live.url, asked.id).answer == {}
