"""Forged paging cursors: a clear 400 from the API, the first page on the inbox, never a 500, on both databases."""

from __future__ import annotations

import base64
import threading

import httpx
import pytest

from tarry.store import Store
from tests.web.client import AUTH, Inbox, problem
from tests.web.server import LiveServer
from tests.web.tools import call, park, run


def forged(text: str) -> str:
    """A cursor as the API makes them (URL-safe base64, unpadded) around ``text``."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


FORGED = {
    "a call row past any id": forged("q1:99999999999999999999999:0"),
    "a call row one past the largest id": forged(f"q1:{2**63}:0"),
    "a number past a 32-bit integer": forged(f"q1:1:{2**31}"),
    "a NUL in a chat's own question id": forged("q1:0:0:a\x00b"),
    "a negative number": forged("q1:1:-1"),
    "a number that is not a whole number": forged("q1:1:1.5"),
    "digits of another script": forged("q1:1:\u0661"),
    "a question id on a call's cursor": forged("q1:7:0:x"),
    "an own question without an id": forged("q1:0:3"),
    "an id longer than any": forged("q1:0:0:" + "x" * 37),
    "another version": forged("q9:1:1"),
    "JSON": forged('{"call_row": 1}'),
    "bad base64": "!!not*base64!!",
    "base64 of bytes that are not text": base64.urlsafe_b64encode(b"\xff\xfe\x00").decode(),
    "non-ASCII": "q1\u00e9",
}


@pytest.mark.parametrize("cursor", FORGED.values(), ids=FORGED.keys())
def test_a_forged_cursor_is_a_400_problem_naming_the_cursor(any_database: str, cursor: str) -> None:
    park(any_database, call("refund", order="A1", amount=1))
    inbox = Inbox(any_database)
    with inbox.client as client:
        refused = problem(client.get("/api/questions", params={"cursor": cursor}, headers=AUTH), 400)
        assert "is not a cursor from a page of pending questions" in refused["detail"]
        assert refused["errors"] == {"cursor": "not a cursor this API gave"}
        assert "Traceback" not in str(refused)
        # The inbox page and its fragment show the first page instead.
        for path in ("/", "/fragments/inbox"):
            page = client.get(path, params={"cursor": cursor}, headers=AUTH)
            assert page.status_code == 200 and "data-question=" in page.text
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def test_the_store_refuses_a_cursor_that_is_not_text(any_database: str) -> None:
    async def ask(cursor: object) -> None:
        async with Store(any_database) as store:
            await store.pending_questions(cursor=cursor)  # type: ignore[arg-type]

    for wrong in (12, b"cTE6MTox", ["q1"]):
        with pytest.raises(ValueError, match=f"not {type(wrong).__name__}"):
            run(lambda wrong=wrong: ask(wrong))  # type: ignore[misc]


def test_a_real_cursor_still_walks_the_pages(any_database: str) -> None:
    chat = park(any_database, *[call("refund", order=f"A{number}", amount=1) for number in range(3)])
    inbox = Inbox(any_database)
    with inbox.client as client:
        first = client.get("/api/questions", params={"limit": 2}, headers=AUTH)
        second = client.get(first.links["next"]["url"], headers=AUTH)
        assert [item["chat_id"] for item in first.json() + second.json()] == [chat] * 3
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "cursor", [FORGED["a call row past any id"], FORGED["a NUL in a chat's own question id"]], ids=["overflow", "NUL"]
)
def test_a_forged_cursor_does_not_end_the_live_event_stream(any_database: str, cursor: str) -> None:
    with LiveServer(any_database) as live:
        events = f"{live.base}/events"
        with (
            httpx.Client(headers=live.auth, timeout=60) as client,
            client.stream("GET", events, params={"cursor": cursor}) as stream,
        ):
            assert stream.status_code == 200
            lines = stream.iter_lines()
            assert next(lines) == "retry: 1000"
            seen = threading.Event()

            def change() -> None:  # new questions until the stream reports one (the first may predate its first look)
                for number in range(30):
                    park(any_database, call("refund", order=f"new{number}", amount=1))
                    if seen.wait(2):
                        return

            changing = threading.Thread(target=change)
            changing.start()
            try:
                assert "event: change" in lines, "the event stream ended without reporting a change"
            finally:
                seen.set()
                changing.join(timeout=120)
