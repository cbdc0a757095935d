"""The conversation page, the event stream and "you already decided", through the app without a browser."""

from __future__ import annotations

import re
import threading
from typing import Any

import httpx
from starlette.requests import HTTPConnection

from tarry.store import Store
from tarry.web.events import STREAM_FOR
from tarry.web.views import PAGE_SIZE
from tests.web.client import AUTH, TOKEN, Inbox, problem
from tests.web.server import LiveServer
from tests.web.tools import XSS, call, converse, park, pending, run


def test_the_conversation_shows_messages_calls_results_and_what_waits(inbox: Inbox) -> None:
    chat = converse(inbox.url, "Refund order A7, it was charged twice.", "A7")
    [approval] = pending(inbox.url, chat)
    inbox.client.get(f"/login?token={TOKEN}")
    page = inbox.client.get("/")
    assert f'href="/chats/{chat}"' in page.text  # each question links to its chat's page
    shown = inbox.client.get(f"/chats/{chat}")
    assert shown.status_code == 200 and shown.headers["cache-control"] == "no-store"
    text = shown.text
    assert "Refund order A7, it was charged twice." in text
    assert "Calls <code>lookup</code>" in text and "Order A7 was paid twice." in text
    assert "Calls <code>refund</code>" in text and "&#34;amount&#34;: 5" in text
    assert "waits for approval" in text and f"#q-{approval.id}" in text
    fragment = inbox.client.get(f"/fragments/chats/{chat}")
    assert fragment.status_code == 200 and 'id="conversation"' in fragment.text and "<html" not in fragment.text
    missing = inbox.client.get("/chats/no-such-chat")
    assert missing.status_code == 404 and 'data-refused="no-chat"' in missing.text


def test_the_inbox_shows_a_page_of_questions_and_links_to_the_next(inbox: Inbox) -> None:
    chat = park(inbox.url, *[call("refund", order=f"A{number}", amount=number) for number in range(PAGE_SIZE + 1)])
    asked = [question.id for question in pending(inbox.url, chat)]
    first = inbox.client.get("/", headers=AUTH).text
    assert re.findall(r'data-question="([^"]+)"', first) == asked[:PAGE_SIZE]
    assert f'id="question-count">{PAGE_SIZE}+<' in first
    [more] = re.findall(r'href="([^"]+)" rel="next" id="more-questions"', first)
    assert more.startswith("/?cursor=")
    second = inbox.client.get(more.replace("&amp;", "&"), headers=AUTH).text
    assert re.findall(r'data-question="([^"]+)"', second) == asked[PAGE_SIZE:]
    assert 'id="more-questions"' not in second
    fragment = inbox.client.get("/fragments/inbox" + more[1:].replace("&amp;", "&"), headers=AUTH).text
    assert re.findall(r'data-question="([^"]+)"', fragment) == asked[PAGE_SIZE:]
    assert "data-question" in inbox.client.get("/?cursor=nonsense", headers=AUTH).text  # a bad cursor: page one


def test_hostile_text_in_messages_arguments_and_results_is_escaped(inbox: Inbox) -> None:
    chat = converse(inbox.url, XSS + "\u202e", XSS)
    text = inbox.client.get(f"/chats/{chat}", headers=AUTH).text
    assert "<script>window.__pwned" not in text and "<img src=x" not in text
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in text
    assert "\u202e" not in text and "\\u202e" in text


def test_a_chat_page_asks_authorize_about_the_chat(database_url: str) -> None:
    mine = converse(database_url, "mine", "M1")
    theirs = converse(database_url, "theirs", "T1")

    def authorize(connection: HTTPConnection, item: Any) -> bool:
        return item is None or item.chat_id == mine

    inbox = Inbox(database_url, authorize=authorize)
    with inbox.client as client:
        assert client.get(f"/chats/{mine}").status_code == 200
        refused = client.get(f"/chats/{theirs}")
        assert refused.status_code == 403 and "theirs" not in refused.text and "T1" not in refused.text
        assert client.get(f"/fragments/chats/{theirs}").status_code == 403
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def test_deciding_again_what_you_decided_says_you_did(inbox: Inbox) -> None:
    chat = park(inbox.url, call("refund", order="A1", amount=1))
    [asked] = pending(inbox.url, chat)
    assert inbox.client.post(f"/api/questions/{asked.id}/approve", headers=AUTH).status_code == 200
    again = problem(inbox.client.post(f"/api/questions/{asked.id}/approve", headers=AUTH), 409)
    assert again["detail"].startswith("You already decided")
    # Through the page, in a browser session of its own: the same.
    other = park(inbox.url, call("refund", order="A2", amount=2))
    [second] = pending(inbox.url, other)
    page = inbox.client.get(f"/login?token={TOKEN}")
    token = page.text.split('name="csrf_token" value="')[1].split('"')[0]
    first = inbox.client.post(f"/questions/{second.id}/approve", data={"csrf_token": token})
    assert 'data-outcome="approved"' in first.text
    repeated = inbox.client.post(f"/questions/{second.id}/approve", data={"csrf_token": token})
    assert 'data-outcome="yours"' in repeated.text and "You already decided this question" in repeated.text
    # Someone else (a script with the token) is still "someone else".
    assert "Someone else" in problem(inbox.client.post(f"/api/questions/{asked.id}/decline", json={}), 409)["detail"]


def test_the_event_stream_says_change_when_another_store_answers(live: LiveServer) -> None:
    chat = park(live.url, call("refund", order="E1", amount=1))
    [asked] = pending(live.url, chat)
    lines: list[str] = []
    opened = threading.Event()

    def listen() -> None:
        with (
            httpx.Client(base_url=live.base, headers=live.auth, timeout=STREAM_FOR + 10) as client,
            client.stream("GET", "/events") as stream,
        ):
            assert stream.headers["content-type"].startswith("text/event-stream")
            for line in stream.iter_lines():
                lines.append(line)
                if line.startswith("retry:"):
                    opened.set()
                if line == "event: change":
                    return

    listener = threading.Thread(target=listen)
    listener.start()
    assert opened.wait(10), "the event stream did not open"

    async def approve() -> None:
        async with Store(live.url) as store:
            assert await store.approve(asked.id)

    run(approve)
    listener.join(timeout=STREAM_FOR + 10)
    assert "event: change" in lines, lines  # the stream would otherwise end without one
