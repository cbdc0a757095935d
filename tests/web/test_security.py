"""What a security probe of a live inbox found, each closed: authorize on every list, bodies, cookies, CSRF, links."""

from __future__ import annotations

import asyncio
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import HTTPConnection

from tarry.store import Store
from tarry.web import ChatRef, create_app
from tarry.web.guard import MAX_BODY
from tarry.web.serve import exposure_warning, loopback
from tests.web.client import AUTH, TOKEN, Inbox, problem
from tests.web.server import LiveServer
from tests.web.tools import call, park, pending, question, setup


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None, "the page has no form with a CSRF token"
    return found.group(1)


def test_authorize_filters_tasks_and_chats_item_by_item(database_url: str) -> None:
    setup(database_url)
    mine = park(database_url, call("render", pages=1), call("refund", order="mine", amount=1))
    theirs = park(database_url, call("render", pages=9), call("refund", order="theirs", amount=1))
    asked: list[type] = []

    def authorize(connection: HTTPConnection, item: Any) -> bool:
        asked.append(type(item))
        if connection.headers.get("x-user") != "ada":
            return False
        return item is None or item.chat_id == mine

    inbox = Inbox(database_url, authorize=authorize)
    with inbox.client as client:
        ada = {"x-user": "ada"}
        tasks = client.get("/api/tasks", headers=ada).json()
        assert [task["chat_id"] for task in tasks] == [mine]
        assert client.get("/api/tasks", params={"chat_id": theirs}, headers=ada).json() == []
        for path in ("/", f"/?chat={theirs}", f"/fragments/inbox?chat={theirs}", "/fragments/inbox"):
            page = client.get(path, headers=ada)
            assert page.status_code == 200
            assert f'<option value="{theirs}"' not in page.text  # the chat filter does not offer their chat
            echoed = re.sub(r'<div id="live"[^>]*>', "", page.text)  # the live region echoes the filter asked for
            assert theirs not in echoed
            assert "page 3 of 9" not in page.text and "theirs" not in page.text
        assert mine in client.get("/", headers=ada).text and "page 3 of 1" in client.get("/", headers=ada).text
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]
    from tarry.store.waiting import WaitingTask

    assert {WaitingTask, ChatRef, type(None)} <= set(asked)


def test_authorize_and_a_token_together_are_refused(database_url: str) -> None:
    store = Store(database_url)
    with pytest.raises(ValueError, match="authorize or token"):
        create_app(store, authorize=lambda connection, item: True, token="s3cret")
    asyncio.run(store.close())


def drive(app: Any, headers: dict[str, str], chunks: list[bytes]) -> tuple[int, int]:
    """POST straight to the ASGI app; returns the status and how many body chunks the app read."""
    read = 0

    async def receive() -> dict[str, Any]:
        nonlocal read
        if read < len(chunks):
            read += 1
            return {"type": "http.request", "body": chunks[read - 1], "more_body": read < len(chunks)}
        return {"type": "http.disconnect"}

    status: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/questions/q/answer",
        "raw_path": b"/api/questions/q/answer",
        "query_string": b"",
        "root_path": "",
        "headers": [(name.lower().encode(), value.encode()) for name, value in headers.items()],
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
    }
    asyncio.run(app(scope, receive, send))
    return status[0], read


def test_a_body_is_read_only_after_login_and_only_up_to_the_limit(database_url: str) -> None:
    store = Store(database_url)
    app = create_app(store, token=TOKEN)
    megabyte = b"x" * 1_000_000
    twenty = [megabyte] * 20
    json = {"content-type": "application/json"}
    # Unauthenticated: 401 before a byte of the 20 MB is read.
    assert drive(app, {**json, "content-length": str(20_000_000)}, twenty) == (401, 0)
    # Logged in, but the declared size is too big: 413, unread.
    assert drive(app, {**json, **AUTH, "content-length": str(20_000_000)}, twenty) == (413, 0)
    # Logged in, no declared size: reading stops at the chunk that passes the limit.
    status, read = drive(app, {**json, **AUTH}, [b"x" * 600_000] * 5)
    assert (status, read) == (413, 2)
    assert MAX_BODY < 1_200_000
    asyncio.run(store.close())


def test_an_oversized_answer_is_413_as_a_problem(inbox: Inbox) -> None:
    chat = park(inbox.url, call("code", order="A1"))
    [asked] = pending(inbox.url, chat)
    response = inbox.client.post(
        f"/api/questions/{asked.id}/answer", json={"code": "abc", "remark": "x" * (MAX_BODY + 1)}, headers=AUTH
    )
    problem(response, 413)
    assert question(inbox.url, asked.id).decision is None


def test_patterns_are_ecma_262_and_values_are_bounded_and_hold_no_nul(inbox: Inbox) -> None:
    chat = park(inbox.url, call("code", order="A1"), call("book_table", restaurant="Roma"))
    code, booking = pending(inbox.url, chat)
    post = inbox.client.post
    # Python's $ matches before a final newline; ECMA-262's does not.
    refused = problem(post(f"/api/questions/{code.id}/answer", json={"code": "abc\n"}, headers=AUTH), 400)
    assert "does not match the pattern" in refused["errors"]["code"]
    nul = problem(post(f"/api/questions/{code.id}/answer", json={"code": "abc", "remark": "a\x00b"}, headers=AUTH), 400)
    assert "NUL" in nul["errors"]["remark"]
    huge = {"time": "19:00", "email": "a" * 15_000 + "@example.com"}
    long = problem(post(f"/api/questions/{booking.id}/answer", json=huge, headers=AUTH), 400)
    assert "at most 10000 characters" in long["errors"]["email"]
    assert question(inbox.url, code.id).decision is None and question(inbox.url, booking.id).decision is None
    assert post(f"/api/questions/{code.id}/answer", json={"code": "abc"}, headers=AUTH).status_code == 200


def test_cookies_are_named_for_the_port_or_host_only_on_https(database_url: str) -> None:
    setup(database_url)
    plain = Inbox(database_url, base="http://127.0.0.1:8123")
    with plain.client as client:
        login = client.get(f"/login?token={TOKEN}", follow_redirects=False)
        assert set(login.cookies) == {"tarry_session_8123"}
        page = client.get("/")
        assert page.status_code == 200 and "tarry_csrf_8123" in client.cookies
        client.portal.call(plain.store.close)  # type: ignore[union-attr]
    secure = Inbox(database_url, base="https://127.0.0.1")
    with secure.client as client:
        login = client.get(f"/login?token={TOKEN}", follow_redirects=False)
        header = login.headers["set-cookie"]
        assert header.startswith("__Host-tarry_session=") and "Secure" in header and "Path=/" in header
        client.portal.call(secure.store.close)  # type: ignore[union-attr]


def test_a_csrf_token_is_bound_to_its_session_and_origin(inbox: Inbox) -> None:
    chat = park(inbox.url, call("refund", order="A1", amount=1))
    [asked] = pending(inbox.url, chat)
    client = inbox.client
    first = client.get(f"/login?token={TOKEN}")
    token, cookie = csrf_of(first.text), client.cookies["tarry_csrf_80"]
    # Another session (another browser, logged in too) holding the first one's CSRF cookie and token.
    client.cookies.clear()
    client.get(f"/login?token={TOKEN}")
    client.cookies.set("tarry_csrf_80", cookie, domain="127.0.0.1")
    action = f"/questions/{asked.id}/approve"
    stolen = client.post(action, data={"csrf_token": token}, follow_redirects=False)
    assert stolen.status_code == 403 and 'data-refused="csrf"' in stolen.text
    own = csrf_of(client.get("/").text)
    for header in ({"Origin": "http://127.0.0.1:9999"}, {"Sec-Fetch-Site": "same-site"}):
        other = client.post(action, data={"csrf_token": own}, headers=header, follow_redirects=False)
        assert other.status_code == 403
    assert question(inbox.url, asked.id).decision is None
    accepted = client.post(action, data={"csrf_token": own}, headers={"Origin": "http://127.0.0.1"})
    assert accepted.status_code == 200 and question(inbox.url, asked.id).decision == "accept"


def test_responses_with_question_data_and_the_login_redirect_are_not_cached(inbox: Inbox) -> None:
    park(inbox.url, call("refund", order="A1", amount=1))
    assert inbox.client.get("/api/questions", headers=AUTH).headers["cache-control"] == "no-store"
    assert inbox.client.get("/api/tasks", headers=AUTH).headers["cache-control"] == "no-store"
    login = inbox.client.get(f"/login?token={TOKEN}", follow_redirects=False)
    assert login.status_code == 303 and login.headers["cache-control"] == "no-store"
    assert inbox.client.get("/").headers["cache-control"] == "no-store"
    assert "no-store" not in inbox.client.get("/static/style.css").headers.get("cache-control", "")


@pytest.mark.parametrize(
    ("url", "shown", "warning"),
    [
        ("https://\u0430pple.com/login", "xn--pple-43d.com", "letters that can look like others"),
        ("https://bank.example.com@evil.example/login", "evil.example", "not where the link goes"),
        ("https://example.com/\u202egnp.exe", "[U+202E]", "invisible characters"),
    ],
)
def test_look_alike_links_show_their_real_host_and_a_warning(inbox: Inbox, url: str, shown: str, warning: str) -> None:
    park(inbox.url, call("link", url=url))
    page = inbox.client.get("/", headers=AUTH).text
    assert shown in page and warning in page
    assert "\u202e" not in page


def test_serving_beyond_loopback_warns_of_plain_http() -> None:
    assert all(loopback(host) for host in ("127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2"))
    assert not any(loopback(host) for host in ("0.0.0.0", "::", "192.168.1.4", "example.com"))
    assert exposure_warning("127.0.0.1") is None
    said = exposure_warning("0.0.0.0")
    assert said is not None and "plain HTTP on 0.0.0.0" in said and "HTTPS" in said


def test_the_login_cookie_of_a_mounted_inbox_stays_under_its_path(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mounted.db'}"
    setup(url)
    inbox = Inbox(url)
    from fastapi import FastAPI
    from starlette.testclient import TestClient

    host = FastAPI()
    host.mount("/inbox", inbox.app)
    with TestClient(host, base_url="http://127.0.0.1") as client:
        login = client.get(f"/inbox/login?token={TOKEN}", follow_redirects=False)
        assert "Path=/inbox" in login.headers["set-cookie"]
        assert client.post("/inbox/api/questions/x/approve", content=b"x" * 10).status_code == 403
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def test_with_authorize_a_csrf_token_is_bound_to_the_host_apps_user(database_url: str) -> None:
    from fastapi import FastAPI
    from starlette.authentication import AuthCredentials, AuthenticationBackend, SimpleUser
    from starlette.middleware.authentication import AuthenticationMiddleware
    from starlette.testclient import TestClient

    class ByHeader(AuthenticationBackend):
        async def authenticate(self, connection: HTTPConnection) -> tuple[AuthCredentials, SimpleUser] | None:
            user = connection.headers.get("x-user")
            return None if user is None else (AuthCredentials(["inbox"]), SimpleUser(user))

    setup(database_url)
    chat = park(database_url, call("refund", order="A1", amount=1))
    [asked] = pending(database_url, chat)
    inbox = Inbox(database_url, authorize=lambda connection, item: "x-user" in connection.headers)
    host = FastAPI()
    host.add_middleware(AuthenticationMiddleware, backend=ByHeader())
    host.mount("/inbox", inbox.app)
    with TestClient(host, base_url="http://127.0.0.1") as client:
        token = csrf_of(client.get("/inbox/", headers={"x-user": "ada"}).text)
        action = f"/inbox/questions/{asked.id}/approve"
        # Eve, in Ada's browser (same CSRF cookie), cannot use the token the page gave Ada.
        forged = client.post(action, data={"csrf_token": token}, headers={"x-user": "eve"}, follow_redirects=False)
        assert forged.status_code == 403 and question(database_url, asked.id).decision is None
        done = client.post(action, data={"csrf_token": token}, headers={"x-user": "ada"}, follow_redirects=False)
        assert done.status_code == 303 and question(database_url, asked.id).decision == "accept"
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def test_ten_concurrent_answers_record_one_and_the_rest_are_409(live: LiveServer) -> None:
    chat = park(live.url, call("refund", order="R1", amount=1))
    [asked] = pending(live.url, chat)
    start = threading.Barrier(10)

    def approve(_: int) -> int:
        with httpx.Client(base_url=live.base, headers=live.auth, timeout=60) as client:
            start.wait()
            return client.post(f"/api/questions/{asked.id}/approve").status_code

    with ThreadPoolExecutor(max_workers=10) as pool:
        statuses = sorted(pool.map(approve, range(10)))
    assert statuses == [200] + [409] * 9
    assert question(live.url, asked.id).decision == "accept"
    assert [decided.id for decided in live.answered] == [asked.id]


def test_a_session_cookie_is_refused_at_any_origin_but_its_own(database_url: str) -> None:
    setup(database_url)
    inbox = Inbox(database_url, base="http://127.0.0.1:8123")
    with inbox.client as client:
        client.get(f"/login?token={TOKEN}", follow_redirects=False)
        session = client.cookies["tarry_session_8123"]
        client.cookies.clear()
        here = {"Cookie": f"tarry_session_8123={session}"}
        assert client.get("/", headers=here).status_code == 200
        # Browsers send the cookie to every port of the host: a server there may replay it under the name for
        # its own port, or to this one with its own Host. The session was issued for http://127.0.0.1:8123 only.
        elsewhere = [
            ("http://127.0.0.1:9000/", {"Cookie": f"tarry_session_9000={session}"}),
            ("http://localhost:8123/", here),
            ("http://127.0.0.2:8123/", here),
        ]
        for url, headers in elsewhere:
            refused = client.get(url, headers=headers)
            assert refused.status_code == 401 and 'data-refused="login"' in refused.text, url
            assert client.get(f"{url}api/questions", headers=headers).status_code == 401
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["token", "authorize"])
def test_a_csrf_token_is_bound_to_the_person_identify_names(database_url: str, mode: str) -> None:
    from tarry import Principal

    setup(database_url)
    chat = park(database_url, call("refund", order="A1", amount=1))
    [asked] = pending(database_url, chat)

    def identify(connection: HTTPConnection) -> Principal | None:
        user = connection.headers.get("x-user")  # how the host app (or a per-user token) tells people apart
        return None if user is None else Principal(user)

    options: dict[str, Any] = {"identify": identify}
    if mode == "authorize":
        options["authorize"] = lambda connection, item: "x-user" in connection.headers
    inbox = Inbox(database_url, **options)
    with inbox.client as client:
        if mode == "token":
            client.get(f"/login?token={TOKEN}")
        token = csrf_of(client.get("/", headers={"x-user": "ada"}).text)
        action = f"/questions/{asked.id}/approve"
        # Eve, in the same browser (same CSRF cookie, same session), cannot use the token the page gave Ada.
        forged = client.post(action, data={"csrf_token": token}, headers={"x-user": "eve"}, follow_redirects=False)
        assert forged.status_code == 403 and 'data-refused="csrf"' in forged.text
        api = client.post(f"/api{action}", headers={"x-user": "eve", "X-CSRF-Token": token})
        assert api.status_code == 403
        assert question(database_url, asked.id).decision is None
        done = client.post(action, data={"csrf_token": token}, headers={"x-user": "ada"}, follow_redirects=False)
        assert done.status_code == 303 and question(database_url, asked.id).decision == "accept"
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def test_the_inbox_answers_the_names_it_is_reached_by() -> None:
    from tarry.web.serve import inbox_hosts

    assert inbox_hosts("127.0.0.1") == ["127.0.0.1", "localhost", "[::1]"]
    assert inbox_hosts("192.0.2.7", ["Inbox.Example.org"])[-2:] == ["192.0.2.7", "inbox.example.org"]
    assert inbox_hosts("2001:db8::7")[-1] == "[2001:db8::7]"
    assert inbox_hosts("0.0.0.0") == ["*"]  # every interface, no name given: it cannot know its names
    assert inbox_hosts("::", ["inbox.example.org"]) == ["inbox.example.org"]
