"""The inbox in Debian's Chromium against a live uvicorn server and a real SQLite file."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
from playwright.sync_api import expect

from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.web.conftest import screenshot
from tests.web.server import LiveServer
from tests.web.tools import TOOLS, XSS, call, park, pending, question, run


def card(page: Any, question_id: str) -> Any:
    return page.locator(f'[data-question="{question_id}"]')


def the_question(url: str, chat_id: str) -> Any:
    [found] = pending(url, chat_id)
    return found


def test_a_form_question_shows_every_field_with_defaults_and_records_the_answer(page: Any, live: LiveServer) -> None:
    chat = park(live.url, call("book_table", restaurant="Luigi's"))
    asked = the_question(live.url, chat)
    page.reload()
    form = card(page, asked.id)
    expect(form.get_by_role("heading")).to_have_text("How should I book Luigi's?")
    # Defaults are pre-filled; bounds and descriptions are shown.
    expect(form.get_by_label("Party size")).to_have_value("2")
    expect(form.get_by_label("Wine")).to_have_value("red")
    expect(form.get_by_label("Sit on the terrace")).not_to_be_checked()
    expect(form.locator('[data-field="party"] .hint')).to_have_text("a whole number from 1 to 12")
    expect(form.locator('[data-field="notes"] .help')).to_have_text("Anything the restaurant should know.")
    expect(form.get_by_role("radio", name="19:00")).to_be_visible()
    screenshot(page, "form-question")

    form.get_by_role("radio", name="20:00").check()
    form.get_by_label("Party size").fill("4")
    form.get_by_label("Email for the confirmation").fill("ada@example.com")
    form.get_by_label("Sit on the terrace").check()
    form.get_by_role("checkbox", name="Pasta").check()
    form.get_by_role("checkbox", name="Salad").check()
    form.get_by_label("Wine").select_option("white")
    form.get_by_label("Budget per person").fill("45.5")
    form.get_by_role("button", name="Send answer").click()

    expect(page.locator('[data-outcome="answered"]')).to_contain_text("Your answer was recorded")
    expect(card(page, asked.id)).to_have_count(0)
    screenshot(page, "form-answered")
    recorded = question(live.url, asked.id)
    assert recorded.decision == "accept"
    assert recorded.answer == {
        "time": "20:00",
        "party": 4,
        "email": "ada@example.com",
        "terrace": True,
        "dishes": ["pasta", "salad"],
        "wine": "white",
        "budget": 45.5,
    }
    assert [answered.id for answered in live.answered] == [asked.id]
    assert [hooked.id for hooked in live.hooked] == [asked.id]


def test_an_approval_shows_the_arguments_and_is_approved_with_the_keyboard(page: Any, live: LiveServer) -> None:
    chat = park(live.url, call("refund", order="A17", amount=30, reason="broken"))
    asked = the_question(live.url, chat)
    page.reload()
    approval = card(page, asked.id)
    expect(approval.locator(".call-name code")).to_have_text("refund")
    expect(approval.locator(".arguments")).to_have_text(
        '{\n  "order": "A17",\n  "amount": 30,\n  "reason": "broken"\n}'
    )
    screenshot(page, "approval")

    for _ in range(30):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent.trim()") == "Approve":
            break
    else:
        raise AssertionError("Tab never reached the Approve button")
    page.keyboard.press("Enter")
    expect(page.locator('[data-outcome="approved"]')).to_contain_text("Approved")
    assert question(live.url, asked.id).decision == "accept"


def test_declining_with_a_note_records_the_note(page: Any, live: LiveServer) -> None:
    chat = park(live.url, call("refund", order="B2", amount=900))
    asked = the_question(live.url, chat)
    page.reload()
    approval = card(page, asked.id)
    approval.get_by_label("Note for the model").fill("Too much; ask for a receipt first.")
    approval.get_by_role("button", name="Decline").click()
    expect(page.locator('[data-outcome="declined"]')).to_contain_text("Declined")
    screenshot(page, "declined")
    recorded = question(live.url, asked.id)
    assert (recorded.decision, recorded.note) == ("decline", "Too much; ask for a receipt first.")


def test_someone_else_answering_first_is_shown_and_the_typed_form_is_left_alone(page: Any, live: LiveServer) -> None:
    chat = park(live.url, call("book_table", restaurant="Roma"))
    asked = the_question(live.url, chat)
    page.reload()
    form = card(page, asked.id)
    form.get_by_label("Party size").fill("5")
    form.get_by_label("Email for the confirmation").fill("me@example.com")

    response = httpx.post(
        f"{live.base}/api/questions/{asked.id}/answer",
        json={"time": "19:00", "email": "other@example.com"},
        headers=live.auth,
    )
    assert response.status_code == 200

    # The live update notices, but the card being typed in stays with its values.
    expect(form.locator(".gone-note")).to_be_visible()
    expect(form.get_by_label("Party size")).to_have_value("5")
    expect(form.get_by_label("Email for the confirmation")).to_have_value("me@example.com")
    screenshot(page, "answered-elsewhere-notice")
    form.get_by_role("radio", name="20:00").check()
    form.get_by_role("button", name="Send answer").click()
    expect(page.locator('[data-outcome="taken"]')).to_contain_text("Someone else already answered")
    screenshot(page, "someone-else-answered")
    assert question(live.url, asked.id).answer["email"] == "other@example.com"


def test_invalid_values_are_shown_next_to_their_fields_with_the_typed_values_kept(page: Any, live: LiveServer) -> None:
    chat = park(live.url, call("book_table", restaurant="Nonna"))
    asked = the_question(live.url, chat)
    page.reload()
    form = card(page, asked.id)
    form.get_by_label("Party size").fill("40")
    form.get_by_label("Email for the confirmation").fill("not an email")
    form.get_by_label("Notes").fill("A quiet table, please")
    with page.expect_response(lambda response: "/answer" in response.url) as sent:
        form.get_by_role("button", name="Send answer").click()
    assert sent.value.status == 400

    form = card(page, asked.id)
    expect(page.locator('[data-outcome="invalid"]')).to_be_visible()
    expect(form.locator('[data-field="party"] .error')).to_contain_text("must be at most 12")
    expect(form.locator('[data-field="email"] .error')).to_contain_text("is not a valid email")
    expect(form.locator('[data-field="time"] .error')).to_have_text("a value is required")
    expect(form.locator('[data-field="wine"] .error')).to_have_count(0)
    expect(form.get_by_label("Party size")).to_have_value("40")
    expect(form.get_by_label("Party size")).to_have_attribute("aria-invalid", "true")
    expect(form.get_by_label("Email for the confirmation")).to_have_value("not an email")
    expect(form.get_by_label("Notes")).to_have_value("A quiet table, please")
    screenshot(page, "validation-errors")
    assert question(live.url, asked.id).decision is None


def test_an_expired_question_says_so_and_takes_no_answer(page: Any, live: LiveServer) -> None:
    chat = park(live.url, call("confirm", ttl=3))
    asked = the_question(live.url, chat)
    page.reload()
    confirm = card(page, asked.id)
    expect(confirm.locator(".lapse")).to_contain_text("Lapses in")
    screenshot(page, "expiring-question")
    confirm.get_by_role("checkbox", name="Go ahead").check()
    # The page marks the card once its time is up (checked against the clock every second); the
    # server's event may also mark it gone from the list, which a card being typed in stays on.
    expect(confirm).to_have_class(re.compile(r"\blapsed\b"), timeout=20_000)
    expect(confirm.locator(".lapsed-note")).to_be_visible()
    confirm.get_by_role("button", name="Send answer").click()
    expect(page.locator('[data-outcome="expired"]')).to_contain_text("expired before your answer arrived")
    screenshot(page, "expired")
    assert question(live.url, asked.id).decision is None


def test_script_and_handler_payloads_render_as_text_and_javascript_urls_are_refused(
    page: Any, live: LiveServer
) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    chat = park(
        live.url,
        call("shout", text=XSS),
        call("link", url="javascript:alert(document.cookie)"),
        call("refund", order=XSS, amount=1),
    )
    shout, visit, refund = pending(live.url, chat)
    page.reload()
    expect(card(page, shout.id).get_by_role("heading")).to_have_text(XSS)
    expect(card(page, shout.id).locator("legend")).to_have_text(XSS)
    expect(card(page, shout.id).get_by_role("radio", name=XSS)).to_have_count(1)
    expect(card(page, refund.id).locator(".arguments")).to_contain_text("<script>")
    expect(card(page, visit.id).locator(".url")).to_have_text("javascript:alert(document.cookie)")
    expect(card(page, visit.id).locator(".refused-link")).to_be_visible()
    screenshot(page, "xss-inert")
    assert page.locator("main img, main script").count() == 0
    assert page.locator('a[href^="javascript:"]').count() == 0
    assert page.evaluate("window.__pwned === undefined")
    assert dialogs == []
    # Accepting the refused link is refused by the server too.
    response = httpx.post(f"{live.base}/api/questions/{visit.id}/answer", json={}, headers=live.auth)
    assert response.status_code == 400
    assert "url" in response.json()["errors"]


def test_a_url_question_shows_the_full_url_and_opens_nothing_by_itself(page: Any, live: LiveServer) -> None:
    opened: list[Any] = []
    page.context.on("page", lambda opened_page: opened.append(opened_page))
    url = "https://calendar.example.com/oauth/authorize?client_id=tarry&scope=read&state=x7"
    chat = park(live.url, call("visit", url=url))
    asked = the_question(live.url, chat)
    page.reload()
    link = card(page, asked.id)
    expect(link.locator(".url")).to_have_text(url)
    consent = link.get_by_role("link", name="Open the page in a new tab")
    expect(consent).to_have_attribute("href", url)
    expect(consent).to_have_attribute("rel", "noopener noreferrer")
    screenshot(page, "url-question")
    link.get_by_role("button", name="I have done it").click()
    expect(page.locator('[data-outcome="answered"]')).to_be_visible()
    assert opened == []
    assert question(live.url, asked.id).decision == "accept"


def test_new_questions_and_tasks_appear_without_a_reload(page: Any, live: LiveServer) -> None:
    first = the_question(live.url, park(live.url, call("book_table", restaurant="Roma")))
    page.reload()
    page.evaluate("window.__samePage = true")
    card(page, first.id).get_by_label("Notes").fill("typing while others arrive")

    second = the_question(live.url, park(live.url, call("refund", order="C3", amount=5)))
    park(live.url, call("render", pages=10))
    expect(card(page, second.id)).to_be_visible()
    expect(page.locator("#live-status")).to_have_text("1 new question arrived.")
    task = page.locator("[data-task]")
    expect(task.locator(".status-message")).to_have_text("Rendering page 3 of 10")
    expect(task.locator(".times")).to_contain_text("every 30 s")
    expect(task.locator(".times")).to_contain_text("Started")
    expect(card(page, first.id).get_by_label("Notes")).to_have_value("typing while others arrive")
    assert page.evaluate("window.__samePage === true")
    screenshot(page, "live-update")


def test_the_page_reads_well_at_phone_width(browser: Any, live: LiveServer) -> None:
    park(live.url, call("book_table", restaurant="Luigi's"), call("refund", order="A17", amount=30))
    park(live.url, call("render", pages=4))
    phone = browser.new_context(viewport={"width": 375, "height": 740}, is_mobile=True)
    try:
        page = phone.new_page()
        page.goto(live.login)
        expect(page.locator("[data-question]")).to_have_count(2)
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
        for label in page.locator("main input:not([type=hidden]), main select, main textarea").all():
            # Every input has a label (its own, or its group's legend for choices).
            labelled = label.evaluate("e => e.labels.length > 0 || e.closest('fieldset') !== null")
            assert labelled
        screenshot(page, "phone")
    finally:
        phone.close()


def test_a_forged_post_without_the_csrf_token_is_refused(page: Any, live: LiveServer) -> None:
    chat = park(live.url, call("refund", order="D4", amount=70))
    asked = the_question(live.url, chat)
    # The logged-in browser's cookies go along, but no CSRF token: as a forging site would send it.
    forged = page.context.request.post(f"{live.base}/questions/{asked.id}/approve", form={"note": "x"})
    assert forged.status == 403
    wrong = page.context.request.post(
        f"{live.base}/questions/{asked.id}/decline", form={"csrf_token": "0" * 64, "note": "x"}
    )
    assert wrong.status == 403
    # The API refuses a cookie-carrying form post too (no JSON, no Authorization, no CSRF header).
    api = page.context.request.post(f"{live.base}/api/questions/{asked.id}/approve", form={"a": "b"})
    assert api.status == 403
    assert api.headers["content-type"] == "application/problem+json"
    page.goto(f"{live.base}/questions/{asked.id}/approve")  # a GET is no way around it
    refused = page.context.request.post(
        f"{live.base}/questions/{asked.id}/approve",
        form={"csrf_token": ""},
        headers={"Sec-Fetch-Site": "cross-site"},
    )
    assert refused.status == 403
    page.set_content(refused.text())
    screenshot(page, "csrf-refused")
    assert question(live.url, asked.id).decision is None


def test_a_request_without_the_login_token_is_refused(context: Any, live: LiveServer) -> None:
    chat = park(live.url, call("refund", order="E5", amount=10))
    asked = the_question(live.url, chat)
    page = context.new_page()
    response = page.goto(f"{live.base}/")
    assert response is not None and response.status == 401
    expect(page.get_by_role("heading")).to_have_text("Log in to see the inbox")
    expect(page.locator("[data-question]")).to_have_count(0)
    screenshot(page, "login-required")

    assert page.goto(f"{live.base}/login?token=wrong").status == 401
    api = context.request.get(f"{live.base}/api/questions")
    assert api.status == 401
    assert api.headers["content-type"] == "application/problem+json"
    post = context.request.post(f"{live.base}/api/questions/{asked.id}/approve", headers={"Authorization": "Bearer no"})
    assert post.status == 401
    assert question(live.url, asked.id).decision is None

    page.goto(live.login)
    expect(card(page, asked.id)).to_be_visible()


def test_giving_the_result_instead_closes_the_call_without_running_the_tool(page: Any, live: LiveServer) -> None:
    chat = park(live.url, call("refund", order="C3", amount=12), call("book_table", restaurant="Roma"))
    approval, form = pending(live.url, chat)
    page.reload()
    expect(card(page, form.id).get_by_label("Give the result instead")).to_have_count(0)
    approving = card(page, approval.id)
    approving.get_by_label("Give the result instead").fill("Refunded 12 on C3 by hand, at the till.")
    approving.get_by_role("button", name="Give this result").click()
    expect(page.locator('[data-outcome="responded"]')).to_contain_text("The tool will not run")
    expect(card(page, approval.id)).to_have_count(0)
    screenshot(page, "responded")
    recorded = question(live.url, approval.id)
    assert (recorded.decision, recorded.answer) == ("respond", {"result": "Refunded 12 on C3 by hand, at the till."})
    assert [answered.decision for answered in live.answered] == ["respond"]

    async def carried_on() -> list[str]:
        async with Store(live.url) as store:
            loaded = await store.load_chat(chat, ScriptedModel(["Done."]), TOOLS)
            await loaded.answer(form.id, {"time": "19:00", "email": "a@example.com"})
            await loaded.complete()
            # By call, not by place: the two calls' results are appended as each finishes.
            assert approval.tool_call is not None
            return [
                message.content
                for message in loaded.messages
                if message.role == "tool" and message.tool_call_id == approval.tool_call.id
            ]

    [refund] = run(carried_on)
    assert json.loads(refund)["result"] == "Refunded 12 on C3 by hand, at the till."
    assert "Refunded 12 on C3." not in refund, "the tool ran"
