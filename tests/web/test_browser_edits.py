"""The inbox's form for approving a call with changed arguments, in Debian's Chromium against a live uvicorn server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from playwright.sync_api import expect

from tarry import Approval, Principal
from tarry.edits import arguments_digest
from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.store.test_processes import finish, start
from tests.web.conftest import screenshot
from tests.web.server import LiveServer
from tests.web.tools import Refund, call, park, pending, question, run, setup


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


class SharedRefund(Refund):
    """Refunds an order; two people approve every refund."""

    requires_approval = Approval(count=2)


def test_an_approval_on_a_page_showing_arguments_changed_since_is_refused_and_shown_again(
    browser: Any, database_url: str, tmp_path: Path
) -> None:
    setup(database_url)
    # Ann, identified by the host app: a policy of two people takes verified identities only.
    with LiveServer(
        database_url, authorize=lambda request, item: True, identify=lambda request: Principal("ann")
    ) as live:
        context = browser.new_context()
        try:
            stale_page(context.new_page(), live, tmp_path)
        finally:
            context.close()


def stale_page(page: Any, live: LiveServer, tmp_path: Path) -> None:
    """Ann's page shows the model's arguments; another person approves them changed; Ann approves on her page."""

    async def parked() -> str:
        async with Store(live.url) as store:
            chat = await store.create_chat(
                ScriptedModel([[call("shared_refund", order="A1", amount=30)], "Done."]), [SharedRefund()]
            )
            await chat.ask("Refund A1")
            return chat.id

    chat = run(parked)
    [asked] = pending(live.url, chat)
    page.goto(f"{live.base}/?chat={chat}")
    card = page.locator(f'[data-question="{asked.id}"]')
    expect(card.locator("pre.arguments")).to_contain_text('"amount": 30')
    seen = card.locator('input[name="seen"]')
    expect(seen).to_have_value(arguments_digest({"order": "A1", "amount": 30}))

    go = tmp_path / "go"
    go.touch()
    other = start("approve_with", live.url, asked.id, "3", str(go), markers=tmp_path / "markers")
    assert json.loads(finish(other)) == {"recorded": True}, "another person approved it with the amount changed"
    expect(card.locator("pre.arguments")).to_contain_text('"amount": 30')  # this page still shows what it loaded

    card.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator('[data-outcome="changed"]')).to_contain_text("The arguments changed since you saw them")
    card = page.locator(f'[data-question="{asked.id}"]')
    expect(card.locator(".proposal-changed")).to_contain_text('it now proposes {"amount": 3, "order": "A1"}')
    expect(card.locator("pre.arguments")).to_contain_text('"amount": 3')
    waiting = question(live.url, asked.id)
    assert waiting.decision is None and [vote.principal.id for vote in waiting.votes] == ["p3"], "nothing recorded"
    screenshot(page, "approve-changed-since")

    card.get_by_role("button", name="Approve", exact=True).click()  # now for what it shows: the second approval
    expect(page.locator('[data-outcome="approved"]')).to_contain_text("Approved")
    decided = question(live.url, asked.id)
    assert decided.decision == "accept" and decided.answer == {"arguments": {"order": "A1", "amount": 3}}
