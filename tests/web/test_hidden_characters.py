"""Characters that hide or reorder text show as ``\\uXXXX`` wherever a page shows text from models, tools, people."""

from __future__ import annotations

import re
from typing import Any

from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.web.client import AUTH, TOKEN, Inbox
from tests.web.server import LiveServer
from tests.web.tools import TOOLS, call, park, pending, run

HIDDEN = {
    "\u202e": "\\u202e",  # right-to-left override
    "\u2066": "\\u2066",  # left-to-right isolate
    "\u200b": "\\u200b",  # zero-width space
    "\u2028": "\\u2028",  # line separator
    "\u3164": "\\u3164",  # Hangul filler: a letter that shows as nothing
    "\u115f": "\\u115f",  # Hangul choseong filler
    "\U000e0041": "\\U000e0041",  # a tag character
}
SNEAKY = "".join(HIDDEN)


def hostile_chat(url: str) -> str:
    """A stored chat where the user, the model, a tool's result, a question and a task all carry hidden characters."""

    async def made() -> str:
        async with Store(url) as store:
            await store.setup()
            calls = [
                call("shout", text=f"Pay{SNEAKY}gnp.exe"),
                call("lookup", order=f"A{SNEAKY}1"),
                call("busy", text=f"Rendering page 3 of 9{SNEAKY}"),
                call(f"nosuchtool{SNEAKY}"),
            ]
            chat = await store.create_chat(ScriptedModel([calls, f"Done{SNEAKY}."]), TOOLS)
            await chat.ask(f"Hello{SNEAKY}")
            return chat.id

    return run(made)


def assert_escaped(html: str, *expected: str) -> None:
    """No hidden character in ``html``, and each of ``expected`` (with ``SNEAKY`` shown escaped) in it."""
    found = sorted({f"U+{ord(c):04X}" for c in html if c in HIDDEN})
    assert not found, f"hidden characters shown raw: {found}"
    shown = "".join(HIDDEN.values())
    for text in expected:
        assert text.replace(SNEAKY, shown) in html, text


def test_the_inbox_shows_hidden_characters_of_questions_and_tasks_escaped(inbox: Inbox) -> None:
    chat = hostile_chat(inbox.url)
    for path in ("/", "/fragments/inbox", f"/?chat={chat}"):
        page = inbox.client.get(path, headers=AUTH)
        assert page.status_code == 200
        # the question's message, its field's title and choice, and the working task's status message
        assert_escaped(page.text, f"Pay{SNEAKY}gnp.exe", f"Rendering page 3 of 9{SNEAKY}")
        assert page.text.count(f"Pay{''.join(HIDDEN.values())}gnp.exe") >= 3


def test_the_conversation_shows_hidden_characters_escaped(inbox: Inbox) -> None:
    chat = hostile_chat(inbox.url)
    [asked] = [item for item in pending(inbox.url, chat) if item.kind == "form"]
    declined = inbox.client.post(f"/api/questions/{asked.id}/decline", json={"note": f"No{SNEAKY}"}, headers=AUTH)
    assert declined.status_code == 200
    for path in (f"/chats/{chat}", f"/fragments/chats/{chat}"):
        page = inbox.client.get(path, headers=AUTH)
        assert page.status_code == 200
        assert_escaped(
            page.text, f"Hello{SNEAKY}", f"A{SNEAKY}1", f"nosuchtool{SNEAKY}", f"No{SNEAKY}", f"Pay{SNEAKY}gnp.exe"
        )


def test_a_form_sends_back_what_was_typed_as_it_was(inbox: Inbox) -> None:
    """The page escapes the text it shows, never the values a form sends back."""
    chat = park(inbox.url, call("code", order="A1"))
    [asked] = pending(inbox.url, chat)
    page = inbox.client.get(f"/login?token={TOKEN}").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert csrf is not None
    typed = {"csrf_token": csrf.group(1), "field:code": "ab", "field:remark": "x\u202ey"}
    again = inbox.client.post(f"/questions/{asked.id}/answer", data=typed)
    assert again.status_code == 400  # the code is too short: the form comes back with what was typed
    assert ">x\u202ey</textarea>" in again.text


def test_chromium_shows_the_escapes_as_text(page: Any, live: LiveServer) -> None:
    chat = hostile_chat(live.url)
    page.goto(f"{live.base}/chats/{chat}")
    text: str = page.locator("#conversation").inner_text()
    assert "Hello\\u202e\\u2066\\u200b" in text
    assert not any(character in text for character in HIDDEN)
    page.goto(f"{live.base}/")
    cards: str = page.locator("#cards").inner_text()
    assert "Pay\\u202e" in cards and not any(character in cards for character in HIDDEN)
