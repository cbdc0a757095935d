"""A link's person decides through the approval policy like anyone else: verified, counted, and refused by it."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from tarry import Approval, Principal, Tool
from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.mail.mailbox import Mailbox
from tests.mail.test_browser_links import SECRET, mailed
from tests.web.server import LiveServer
from tests.web.tools import call, park, pending, question, run, setup

ADA, BO = Principal("u-ada", "Ada Lovelace"), Principal("u-bo", "Bo")
FORM_TOKEN = re.compile(r'name="link_csrf" value="([^"]+)"')


class Payout(Tool):
    """Pays out money; two people approve it."""

    requires_approval = Approval(count=2)

    def execute(self, amount: int) -> str:
        return f"Paid {amount}."


@pytest.fixture
def live(database_url: str) -> Iterator[LiveServer]:
    setup(database_url)
    with LiveServer(database_url, link_secret=SECRET) as server:
        yield server


def confirm(url: str) -> httpx.Response:
    with httpx.Client() as client:
        [token] = FORM_TOKEN.findall(client.get(url).text)
        return client.post(url, data={"link_csrf": token})


def test_two_peoples_links_make_a_two_person_approval(live: LiveServer, mailbox: Mailbox) -> None:
    async def park() -> object:
        async with Store(live.url) as store:
            chat = await store.create_chat(ScriptedModel([[call("payout", amount=70)], "Paid."]), [Payout()])
            await chat.ask("Pay it.")
            [asked] = await store.pending_questions(chat.id)
            return asked

    asked = run(park)
    ada_url = mailed(live, mailbox, asked, ADA)["Approve"]  # type: ignore[arg-type]
    bo_url = mailed(live, mailbox, asked, BO)["Approve"]  # type: ignore[arg-type]

    counted = confirm(ada_url)
    assert counted.status_code == 200
    assert "Your approval was counted" in counted.text  # verified: a link's person counts toward two
    again = confirm(ada_url)
    assert again.status_code == 403  # the same person cannot be the second
    assert 'data-refused="refused"' in again.text
    assert question(live.url, asked.id).decision is None  # type: ignore[attr-defined]

    approved = confirm(bo_url)
    assert approved.status_code == 200
    assert "Approved." in approved.text
    decided = question(live.url, asked.id)  # type: ignore[attr-defined]
    assert decided.decision == "accept"
    assert {vote.principal.id for vote in decided.votes} == {"u-ada", "u-bo"}


def test_a_link_to_a_page_to_visit_shows_it_and_confirms_the_visit(live: LiveServer, mailbox: Mailbox) -> None:
    [asked] = pending(live.url, park(live.url, call("visit", url="https://calendar.example.com/login")))
    answer = mailed(live, mailbox, asked, ADA)["Answer"]
    with httpx.Client() as client:
        page = client.get(answer)
        assert page.status_code == 200
        assert "https://calendar.example.com/login" in page.text
        assert "I have done it" in page.text
        [token] = FORM_TOKEN.findall(page.text)
        assert client.post(answer, data={"link_csrf": token}).status_code == 200
    decided = question(live.url, asked.id)
    assert (decided.decision, decided.decided_by, decided.channel) == ("accept", ADA, "email")
