"""In Debian's Chromium: the conversation page, live updates from another process, and what authorize hides."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect
from starlette.requests import HTTPConnection

from tests.web.conftest import screenshot
from tests.web.server import LiveServer
from tests.web.tools import XSS, call, converse, park, pending, question, setup

ROOT = Path(__file__).resolve().parents[2]
CARRY_ON = """
import asyncio, sys
from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.web.tools import TOOLS

async def main(url, chat_id):
    async with Store(url) as store:
        [asked] = await store.pending_questions(chat_id)
        assert await store.approve(asked.id)
        chat = await store.load_chat(chat_id, ScriptedModel(["Refunded A7, sorry for the trouble."]), TOOLS)
        await chat.complete()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def carry_on_elsewhere(url: str, chat_id: str) -> None:
    """Approve the chat's question and carry the chat on, in another OS process."""
    subprocess.run([sys.executable, "-c", CARRY_ON, url, chat_id], cwd=ROOT, check=True, timeout=120)


def test_a_question_links_to_its_conversation_which_updates_when_another_process_answers(
    page: Any, live: LiveServer
) -> None:
    chat = converse(live.url, "Refund order A7, it was charged twice.", "A7")
    [asked] = pending(live.url, chat)
    page.reload()
    page.locator(f'[data-question="{asked.id}"] .chat-link').click()
    expect(page).to_have_url(f"{live.base}/chats/{chat}")
    turns = page.locator(".turn")
    expect(turns.first).to_contain_text("Refund order A7, it was charged twice.")
    expect(page.locator('[aria-label="Result of lookup"]')).to_have_text("Order A7 was paid twice.")
    expect(page.locator('[aria-label="Arguments of refund"]')).to_contain_text('"amount": 5')
    expect(page.locator(".waits")).to_contain_text("waits for approval")
    expect(page.locator("body")).to_have_attribute("data-listening", "true")
    screenshot(page, "conversation")

    page.evaluate("window.__samePage = true")
    carry_on_elsewhere(live.url, chat)
    # The server's event brings the new turns in without a reload.
    expect(page.locator('[aria-label="Result of refund"]')).to_have_text("Refunded 5 on A7.")
    expect(turns.last).to_contain_text("Refunded A7, sorry for the trouble.")
    expect(page.locator(".waits")).to_have_count(0)
    assert page.evaluate("window.__samePage === true")
    assert question(live.url, asked.id).decision == "accept"
    screenshot(page, "conversation-carried-on")


def test_the_inbox_drops_a_card_when_another_process_answers_it(page: Any, live: LiveServer) -> None:
    chat = converse(live.url, "Refund order B2.", "B2")
    [asked] = pending(live.url, chat)
    page.reload()
    expect(page.locator(f'[data-question="{asked.id}"]')).to_be_visible()
    expect(page.locator("body")).to_have_attribute("data-listening", "true")
    carry_on_elsewhere(live.url, chat)
    expect(page.locator(f'[data-question="{asked.id}"]')).to_have_count(0)
    expect(page.locator("#question-count")).to_have_text("0")


def test_hostile_text_in_a_conversation_stays_inert(page: Any, live: LiveServer) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    chat = converse(live.url, XSS + " \u202eevil", XSS)
    page.goto(f"{live.base}/chats/{chat}")
    expect(page.locator(".turn-user .content")).to_have_text(XSS + " \\u202eevil")
    expect(page.locator('[aria-label="Arguments of lookup"]')).to_contain_text("<script>")
    expect(page.locator('[aria-label="Result of lookup"]')).to_contain_text("<img src=x")
    assert page.locator("main img, main script").count() == 0
    assert page.evaluate("window.__pwned === undefined")
    assert dialogs == []
    screenshot(page, "conversation-xss-inert")


@pytest.fixture
def guarded(database_url: str) -> Iterator[tuple[LiveServer, str, str]]:
    """An inbox whose ``authorize`` lets each user see only her own chats (named by ``x-user``)."""
    setup(database_url)
    ada = converse(database_url, "Ada's refund, please.", "ADA-1")
    park(database_url, call("render", pages=4))  # a task of nobody's
    eve = converse(database_url, "Eve's secret refund.", "EVE-9")
    park(database_url, call("render", pages=9))
    owners = {ada: "ada", eve: "eve"}

    def authorize(connection: HTTPConnection, item: Any) -> bool:
        user = connection.headers.get("x-user")
        return user is not None and (item is None or owners.get(item.chat_id) == user)

    with LiveServer(database_url, authorize=authorize) as server:
        yield server, ada, eve


def test_a_user_sees_nothing_of_another_users_chats(browser: Any, guarded: tuple[LiveServer, str, str]) -> None:
    live, ada, eve = guarded
    context = browser.new_context(extra_http_headers={"x-user": "ada"})
    try:
        page = context.new_page()
        page.goto(f"{live.base}/")
        expect(page.locator("[data-question]")).to_have_count(1)
        expect(page.locator("[data-task]")).to_have_count(0)
        text = page.locator("body").inner_text()
        assert "EVE-9" not in text and eve not in page.content() and "page 3 of 9" not in text
        assert [option.get_attribute("value") for option in page.locator("#chat-filter option").all()] == ["", ada]
        for path in (f"/?chat={eve}", f"/fragments/inbox?chat={eve}", f"/api/tasks?chat_id={eve}"):
            response = page.goto(f"{live.base}{path}")
            assert response is not None and "EVE-9" not in page.content() and "page 3 of 9" not in page.content()
        assert page.goto(f"{live.base}/chats/{eve}").status == 403
        assert "secret" not in page.content()
        assert page.goto(f"{live.base}/chats/{ada}").status == 200
        expect(page.locator(".turn").first).to_contain_text("Ada's refund, please.")
        screenshot(page, "authorize-own-chat-only")
    finally:
        context.close()


def test_look_alike_links_name_their_real_host_and_cookies_name_their_port(page: Any, live: LiveServer) -> None:
    chat = park(live.url, call("link", url="https://\u0430pple.com@evil.example/\u202egnp.exe"))
    [asked] = pending(live.url, chat)
    page.reload()
    link = page.locator(f'[data-question="{asked.id}"]')
    expect(link.locator(".host")).to_have_text("Goes to evil.example")
    expect(link.locator(".url")).to_contain_text("[U+202E]")
    expect(link.locator(".link-warning")).to_have_count(2)  # the user@host part, the hidden character
    href = link.get_by_role("link", name="Open the page in a new tab").get_attribute("href")
    assert href is not None and "%E2%80%AE" in href and "\u202e" not in href
    screenshot(page, "look-alike-link")
    names = {cookie["name"] for cookie in page.context.cookies()}
    assert names == {f"tarry_session_{live.port}", f"tarry_csrf_{live.port}"}
