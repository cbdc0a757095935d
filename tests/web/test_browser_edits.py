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
    identified_as_ann(browser, database_url, tmp_path, stale_page)


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
    seen = card.locator('form.decide input[name="seen"]')
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


def identified_as_ann(browser: Any, database_url: str, tmp_path: Path, scene: Any) -> None:
    """Run ``scene(page, live, tmp_path)`` on a page of an inbox whose host app says the person is Ann (a policy of
    two people takes verified identities only)."""
    setup(database_url)
    with LiveServer(
        database_url, authorize=lambda request, item: True, identify=lambda request: Principal("ann")
    ) as live:
        context = browser.new_context()
        try:
            scene(context.new_page(), live, tmp_path)
        finally:
            context.close()


def parked_refunds(url: str, *orders: str) -> str:
    """A stored chat parked on a shared refund of 30 for each of ``orders``; returns its id."""

    async def parked() -> str:
        async with Store(url) as store:
            calls = [call("shared_refund", order=order, amount=30) for order in orders]
            chat = await store.create_chat(ScriptedModel([calls, "Done."]), [SharedRefund()])
            await chat.ask("Refund them")
            return chat.id

    return run(parked)


def changed_by_another_process(url: str, question_id: str, tmp_path: Path) -> None:
    """Another person, in a process of their own, approves ``question_id`` with its amount changed to 3 (1 of 2)."""
    go = tmp_path / "go"
    go.touch()
    other = start("approve_with", url, question_id, "3", str(go), markers=tmp_path / "markers")
    assert json.loads(finish(other)) == {"recorded": True}


def test_approve_all_on_a_page_showing_arguments_changed_since_approves_none_and_shows_them_again(
    browser: Any, database_url: str, tmp_path: Path
) -> None:
    identified_as_ann(browser, database_url, tmp_path, stale_turn)


def stale_turn(page: Any, live: LiveServer, tmp_path: Path) -> None:
    """Two refunds each approved once (1 of 2); Ann's page offers to approve both; another person changes one."""
    chat = parked_refunds(live.url, "A1", "A2")
    by_order = {asked.tool_call.arguments["order"]: asked for asked in pending(live.url, chat) if asked.tool_call}
    first, second = by_order["A1"], by_order["A2"]

    async def counted() -> None:
        async with Store(live.url) as store:
            for asked in (first, second):
                assert await store.approve(asked.id, by="p1")

    run(counted)
    page.goto(f"{live.base}/?chat={chat}")
    form = page.locator("#approve-all")
    expect(form).to_contain_text("All 2 calls")
    digest = arguments_digest({"order": "A2", "amount": 30})
    expect(form.locator(f'input[name="seen"][value="{second.id}={digest}"]')).to_have_count(1)
    expect(form.locator('input[name="seen"]')).to_have_count(2)

    changed_by_another_process(live.url, second.id, tmp_path)
    form.get_by_role("button", name="Approve all in this conversation").click()
    notice = page.locator('[data-outcome="all-changed"]')
    expect(notice).to_contain_text("arguments changed since you saw them, so none of the conversation's calls was")
    expect(notice.locator(".about")).to_contain_text("shared_refund")
    screenshot(page, "approve-all-changed-since")
    now = [question(live.url, asked.id) for asked in (first, second)]
    assert [asked.decision for asked in now] == [None, None], "nothing approved, the unchanged refund neither"
    assert [[vote.principal.id for vote in asked.votes] for asked in now] == [["p1"], ["p1", "p3"]]
    expect(page.locator(f'[data-question="{second.id}"] pre.arguments')).to_contain_text('"amount": 3')

    page.locator("#approve-all").get_by_role("button", name="Approve all in this conversation").click()
    expect(page.locator('[data-outcome="all-approved"]')).to_contain_text("Approved every call")
    decided = [question(live.url, asked.id) for asked in (first, second)]
    assert [asked.decision for asked in decided] == ["accept", "accept"]
    assert decided[1].answer == {"arguments": {"order": "A2", "amount": 3}}


def test_a_response_on_a_page_showing_arguments_changed_since_is_refused_and_shown_again(
    browser: Any, database_url: str, tmp_path: Path
) -> None:
    identified_as_ann(browser, database_url, tmp_path, stale_response)


def stale_response(page: Any, live: LiveServer, tmp_path: Path) -> None:
    """Ann's page shows the model's refund of 30; another person approves it changed to 3; Ann gives a result."""
    chat = parked_refunds(live.url, "A1")
    [asked] = pending(live.url, chat)
    page.goto(f"{live.base}/?chat={chat}")
    card = page.locator(f'[data-question="{asked.id}"]')
    respond = card.locator("form.respond")
    expect(respond.locator('input[name="seen"]')).to_have_value(arguments_digest({"order": "A1", "amount": 30}))

    changed_by_another_process(live.url, asked.id, tmp_path)
    respond.get_by_label("Give the result instead").fill("refunded 30 by hand")
    respond.get_by_role("button", name="Give this result").click()
    expect(page.locator('[data-outcome="changed"]')).to_contain_text("The arguments changed since you saw them")
    card = page.locator(f'[data-question="{asked.id}"]')
    expect(card.locator(".proposal-changed")).to_contain_text('it now proposes {"amount": 3, "order": "A1"}')
    waiting = question(live.url, asked.id)
    assert waiting.decision is None and [vote.principal.id for vote in waiting.votes] == ["p3"], "nothing recorded"

    respond = card.locator("form.respond")
    respond.get_by_label("Give the result instead").fill("refunded 3 by hand")
    respond.get_by_role("button", name="Give this result").click()
    expect(page.locator('[data-outcome="responded"]')).to_contain_text("Your result was recorded")
    decided = question(live.url, asked.id)
    assert (decided.decision, decided.answer) == ("respond", {"result": "refunded 3 by hand"})
