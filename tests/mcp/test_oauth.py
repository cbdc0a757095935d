"""OAuth-protected MCP servers: the login kept in the store, asked as a URL question, finished from any process.

Real parts throughout: an SDK server that is its own authorization server
(servers/oauth_server.py), the inbox served by ``tarry serve`` in another OS process (its
``/oauth/callback`` receives the redirect), workers in other OS processes
(tests/mcp/proc.py), SQLite files and PostgreSQL. The "browser" is urllib: it opens the
authorization URL and follows the redirect to the callback, as a person's browser does.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import pickle
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from mcp_helpers import HERE, ROOT, SERVERS, free_port, http_server, wait_for_port
from sqlalchemy import select

from tarry import Agent, Chat, Message
from tarry.clock import utcnow
from tarry.mcp import MCPServer
from tarry.mcp.oauth import LoginRefusedError, LoginRequired, OAuthLogin, StoredTokens
from tarry.store import Store
from tarry.store.tables import chats, mcp_logins
from tarry.testing import ScriptedModel, advance_clock
from tarry.web import create_app
from tarry.web.oauth import serve_callback
from tests.store.conftest import database_url  # noqa: F401  (the fixture: SQLite, then PostgreSQL)

CALLS = [{"name": "add", "arguments": {"a": 2, "b": 3}}]


def model() -> ScriptedModel:
    """Calls ``add`` after each user message; then replies with the result."""

    def turn(messages: list[Message]) -> Any:
        return CALLS if messages[-1].role == "user" else f"Done: {messages[-1].content}"

    return ScriptedModel([turn] * 20)


@pytest.fixture
def guarded() -> Iterator[str]:
    """The OAuth-protected SDK server's MCP endpoint (a fresh one: tokens and counts of its own)."""
    with http_server([sys.executable, str(SERVERS / "oauth_server.py"), "{port}"]) as url:
        yield url


@dataclass
class Inbox:
    """``tarry serve`` in another OS process: its redirect endpoint, its root URL and its login token."""

    callback: str
    root: str
    token: str


@pytest.fixture
def inbox(database_url: str) -> Iterator[Inbox]:  # noqa: F811
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "tarry.cli", "serve", "--url", database_url, "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        link = next(line for line in process.stdout if "token=" in line)  # printed once it listens
        token = link.rsplit("token=", 1)[1].strip()
        wait_for_port(port, process)
        root = f"http://127.0.0.1:{port}"
        yield Inbox(f"{root}/oauth/callback", root, token)
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:  # noqa: F811
    async with Store(database_url) as opened:
        await opened.setup()
        yield opened


class _Stay(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


async def browse(url: str) -> tuple[int, str, str]:
    """Open an authorization URL as a browser would: the redirect's target, then that page's status and text."""

    def go() -> tuple[int, str, str]:
        with pytest.raises(urllib.error.HTTPError) as redirect:  # the authorization server redirects (302)
            urllib.request.build_opener(_Stay).open(url)
        assert redirect.value.code == 302, redirect.value.code
        target = redirect.value.headers["Location"]
        return (*fetch(target), target)

    return await asyncio.to_thread(go)


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url) as page:
            return page.status, page.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def stats(mcp_url: str) -> dict[str, int]:
    result: dict[str, int] = httpx.get(mcp_url.replace("/mcp", "/test/stats")).json()
    return result


async def server_hook(mcp_url: str, name: str) -> None:
    """Call one of the test server's hooks (``revoke``: forget every token; ``expire``: the access tokens)."""
    async with httpx.AsyncClient() as client:
        (await client.post(mcp_url.replace("/mcp", f"/test/{name}"))).raise_for_status()


def run_worker(command: str, db: str, chat_id: str, options: dict[str, Any], *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, str(HERE / "proc.py"), command, db, chat_id, json.dumps(options), json.dumps(CALLS)]
    return subprocess.Popen([*argv, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen[str]) -> tuple[dict[str, Any], str]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


async def log_in_first(store: Store, chat: Chat) -> str:
    """The first login, made while listing the server's tools (the chat's own question); returns the code."""
    assert await chat.ask("What is 2 + 3?") is None and chat.waiting
    [question] = await chat.pending_questions()
    assert question.url is not None and question.tool_call is None
    status, page, target = await browse(question.url)
    assert (status, "Logged in" in page) == (200, True)
    reply = await chat.complete()
    assert reply.content == "Done: 5"
    return parse_qs(urlsplit(target).query)["code"][0]


async def secrets_of(store: Store, server: str) -> list[str]:
    """Every token and PKCE verifier the store holds for ``server``."""
    kept = await store.oauth.credentials(server)
    tokens = [kept.tokens["access_token"], kept.tokens["refresh_token"]]
    verifiers = await store.db.run_read(lambda connection: list(connection.scalars(select(mcp_logins.c.code_verifier))))
    return [*tokens, *verifiers]


async def test_a_login_is_a_url_question_of_the_call_and_another_process_carries_on(
    store: Store,
    guarded: str,
    inbox: Inbox,
    database_url: str,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    server = MCPServer(url=guarded, name="guarded", auth=OAuthLogin(store, guarded, redirect_uri=inbox.callback))
    chat = await store.create_chat(model=model(), tools=[server])
    codes = [await log_in_first(store, chat)]

    await server_hook(guarded, "revoke")  # the server forgets the login: the next call needs one
    parked = await chat.ask("And again?")
    assert parked.tool_calls and chat.waiting
    [question] = await store.pending_questions()
    assert question.kind == "url" and question.source == "guarded" and question.tool_call is not None
    assert question.tool_call.name == "add" and question.url is not None
    assert question.url.startswith(guarded.replace("/mcp", "/authorize?"))
    assert question.expires_at is not None
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {inbox.token}"}) as api:
        shown = (await api.get(f"{inbox.root}/api/questions")).json()  # the inbox in the other process lists it
    assert [(item["id"], item["kind"], item["url"]) for item in shown] == [(question.id, "url", question.url)]
    await server.close()

    status, page, target = await browse(question.url)  # the redirect reaches the inbox in the other process
    assert (status, "Logged in" in page) == (200, True)
    codes.append(parse_qs(urlsplit(target).query)["code"][0])
    assert (await store.question(question.id)).decision == "accept"
    assert fetch(target)[0] == 409  # the same redirect again: used, refused

    worker = run_worker("carry", database_url, chat.id, {"url": guarded, "oauth": {"redirect_uri": inbox.callback}})
    state, worker_logs = finished(worker)
    assert state == {"reply": "Done: 5", "waiting": False, "tasks": []}
    assert stats(guarded) == {"registrations": 1, "codes": 2, "refreshes": 0, "add_runs": 2}

    secrets = [*codes, *await secrets_of(store, guarded)]
    for secret in secrets:
        assert secret not in caplog.text
        assert secret not in worker_logs
    assert "Kept new OAuth tokens" in worker_logs  # the worker logged at DEBUG, and exchanged the code


async def test_the_first_login_parks_the_chat_is_answered_in_the_inbox_and_another_process_carries_on(
    store: Store,
    guarded: str,
    inbox: Inbox,
    database_url: str,  # noqa: F811
) -> None:
    server = MCPServer(url=guarded, name="guarded", auth=OAuthLogin(store, guarded, redirect_uri=inbox.callback))
    chat = await store.create_chat(model=model(), tools=[server])
    assert await chat.ask("What is 2 + 3?") is None  # no reply yet: the tools cannot be listed before the login
    assert chat.waiting and [message.role for message in chat.messages] == ["user"]
    [question] = await store.pending_questions()
    assert (question.kind, question.tool_call, question.source, question.chat_id) == ("url", None, "guarded", chat.id)
    assert question.message == "Log in to guarded so the chat can use its tools."
    assert question.url is not None and question.url.startswith(guarded.replace("/mcp", "/authorize?"))
    assert [waiting.id for waiting in await chat.pending_questions()] == [question.id]
    assert await chat.complete() is None  # still waiting: no second login is started
    assert [waiting.id for waiting in await store.pending_questions()] == [question.id]
    logins = await store.db.run_read(lambda connection: list(connection.scalars(select(mcp_logins.c.state))))
    assert len(logins) == 1 and stats(guarded)["codes"] == 0

    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {inbox.token}"}) as api:
        shown = (await api.get(f"{inbox.root}/api/questions")).json()  # the inbox in the other process lists it
    assert [(item["id"], item["kind"], item["url"], item["tool_call"]) for item in shown] == [
        (question.id, "url", question.url, None)
    ]
    async with httpx.AsyncClient(base_url=inbox.root) as browser:
        await browser.get(f"/login?token={inbox.token}")  # the session cookie
        page = (await browser.get("/")).text
    assert question.message in page and html.escape(question.url) in page
    listed = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "tarry.cli", "pending", "--url", database_url, "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert [(item["id"], item["tool_call"], item["url"]) for item in json.loads(listed.stdout)] == [
        (question.id, None, question.url)
    ]

    forged = question.url.replace("state=", "state=forged")
    status, page, target = await browse(forged)  # a state tarry never issued: refused, nothing answered
    assert status == 404 and (await store.question(question.id)).decision is None
    status, page, target = await browse(question.url)  # the redirect reaches the inbox in the other process
    assert (status, "Logged in" in page) == (200, True)
    assert fetch(target)[0] == 409  # the same redirect again: used, refused
    answered = await store.question(question.id)
    assert (answered.decision, answered.channel) == ("accept", "web")
    trail = await store.history(question_id=question.id)
    assert [(event.outcome, event.channel, event.tool) for event in trail] == [("decided", "web", None)]
    due = await store.db.run_read(lambda connection: connection.scalar(select(chats.c.next_check_at)))
    assert due is not None and due <= utcnow()  # the answer woke the chat for the workers
    await server.close()

    worker = run_worker("carry", database_url, chat.id, {"url": guarded, "oauth": {"redirect_uri": inbox.callback}})
    state, _ = finished(worker)  # complete() in another OS process: exchanges the code, lists the tools, calls add
    assert state == {"reply": "Done: 5", "waiting": False, "tasks": []}
    assert stats(guarded) == {"registrations": 1, "codes": 1, "refreshes": 0, "add_runs": 1}
    assert await store.pending_questions() == []


async def test_a_lapsed_login_is_asked_again_a_declined_one_waits_for_the_user_and_memory_chats_raise(
    store: Store, guarded: str
) -> None:
    app = create_app(store)
    callback = "http://inbox/oauth/callback"
    server = MCPServer(
        url=guarded, name="guarded", auth=OAuthLogin(store, guarded, redirect_uri=callback, login_ttl=60)
    )
    chat = await store.create_chat(model=model(), tools=[server])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://inbox") as inbox:

        async def log_in(url: str) -> int:
            redirect = await asyncio.to_thread(authorize, url)
            assert redirect.startswith(callback)
            return (await inbox.get(redirect)).status_code

        await chat.ask("What is 2 + 3?")
        [lapsing] = await chat.pending_questions()
        advance_clock(61)
        assert await log_in(lapsing.url or "") == 410  # too late: refused, and the question lapsed unanswered
        assert await store.pending_questions() == [] and (await store.question(lapsing.id)).decision is None
        await chat.complete()  # asks for a new login
        [declined] = await store.pending_questions()
        assert declined.id != lapsing.id and declined.url != lapsing.url and declined.tool_call is None
        assert await store.decline(declined.id, "not now", channel="web")
        assert await chat.complete() is None and chat.stopped and not chat.waiting
        assert await store.pending_questions() == []  # no new login until the user asks again

        await chat.ask("Try again: what is 2 + 3?")
        [question] = await store.pending_questions()
        assert question.id not in (lapsing.id, declined.id) and not chat.stopped
        assert await log_in(question.url or "") == 200
    reply = await chat.complete()
    assert reply is not None and reply.content == "Done: 5"
    assert stats(guarded)["codes"] == 1
    await server.close()

    bob = MCPServer(url=guarded, auth=OAuthLogin(store, guarded, redirect_uri=callback, user="bob"))
    cancelled = await store.create_chat(model=model(), tools=[bob])
    await cancelled.ask("What is 2 + 3?")
    [login_of_bob] = await store.pending_questions()
    await cancelled.cancel()  # cancelling the chat cancels its own question too
    assert cancelled.stopped and (await store.question(login_of_bob.id)).decision == "cancel"
    assert await cancelled.complete() is None and await store.pending_questions() == []
    await bob.close()

    ann = MCPServer(url=guarded, auth=OAuthLogin(store, guarded, redirect_uri=callback, user="ann"))
    with pytest.raises(LoginRequired) as raised:  # a chat in memory has nowhere to keep the question
        await Chat(model=model(), tools=[ann]).ask("What is 2 + 3?")
    assert raised.value.question.tool_call is None and raised.value.question.url == raised.value.url
    await ann.close()


AGENT = """
from tarry import Agent, Message
from tarry.mcp import MCPServer, OAuthLogin
from tarry.store import Store
from tarry.testing import ScriptedModel


def turn(messages: list[Message]) -> object:
    if messages[-1].role == "user":
        return [{{"name": "add", "arguments": {{"a": 2, "b": 3}}}}]
    return f"Done: {{messages[-1].content}}"


login = OAuthLogin(Store({db!r}), {url!r}, redirect_uri={callback!r})
agent = Agent("calculator", model=lambda: ScriptedModel([turn] * 20), tools=[MCPServer(url={url!r}, auth=login)])
"""


async def test_tarry_worker_carries_the_chat_on_once_its_first_login_is_answered(
    guarded: str,
    database_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    port = free_port()
    callback = f"http://127.0.0.1:{port}/oauth/callback"
    source = AGENT.format(db=database_url, url=guarded, callback=callback)
    (tmp_path / "calculator.py").write_text(source)
    async with Store(database_url) as store, serve_callback(store, port=port):
        await store.setup()
        server = MCPServer(url=guarded, auth=OAuthLogin(store, guarded, redirect_uri=callback))
        chat = await store.create_chat(agent=Agent("calculator", model=model, tools=[server]))  # as calculator.py
        await chat.ask("What is 2 + 3?")
        [question] = await store.pending_questions()
        assert question.tool_call is None and question.url is not None
        await server.close()
        command = [sys.executable, "-m", "tarry.cli", "worker", "--agents", "calculator:agent", "--url", database_url]
        worker = await asyncio.to_thread(
            subprocess.Popen, command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert worker.stdout is not None
            first = await asyncio.wait_for(asyncio.to_thread(worker.stdout.readline), 60)
            assert first.startswith("tarry worker: carrying on chats of calculator"), first
            status, page, _ = await browse(question.url)  # the answer wakes the chat; the worker picks it up
            assert (status, "Logged in" in page) == (200, True)
            async with asyncio.timeout(60):
                while True:
                    done = await store.load_chat(chat.id)
                    reply = done.last_reply  # the calls' message, until the model's answer comes
                    if reply is not None and not reply.tool_calls and not done.waiting:
                        break
                    await asyncio.sleep(0.1)
            assert reply.content == "Done: 5"
        finally:
            worker.send_signal(signal.SIGTERM)
            _, err = await asyncio.to_thread(worker.communicate, timeout=60)
        assert worker.returncode == 0, err
        logins = await store.db.run_read(lambda connection: list(connection.scalars(select(mcp_logins.c.state))))
    assert len(logins) == 1  # the worker started no login of its own while the question waited
    assert stats(guarded) == {"registrations": 1, "codes": 1, "refreshes": 0, "add_runs": 1}


def authorize(url: str) -> str:
    """Open an authorization URL as a browser would, up to the redirect; returns where it redirects to."""
    with pytest.raises(urllib.error.HTTPError) as redirect:
        urllib.request.build_opener(_Stay).open(url)
    assert redirect.value.code == 302, redirect.value.code
    return str(redirect.value.headers["Location"])


async def test_processes_share_one_login_and_refresh_it_once(
    store: Store,
    guarded: str,
    inbox: Inbox,
    database_url: str,  # noqa: F811
) -> None:
    server = MCPServer(url=guarded, auth=OAuthLogin(store, guarded, redirect_uri=inbox.callback))
    await log_in_first(store, await store.create_chat(model=model(), tools=[server]))
    await server.close()

    await server_hook(guarded, "expire")  # the access token ends; the refresh token still works
    kept = await store.oauth.credentials(guarded)
    assert kept.tokens is not None
    await store.oauth.save_tokens(guarded, "", kept.tokens, utcnow() - timedelta(seconds=1))

    chats = [await store.create_chat(model=model()) for _ in range(3)]
    options = {"url": guarded, "oauth": {"redirect_uri": inbox.callback}}
    workers = [run_worker("ask", database_url, chat.id, options, "What is 2 + 3?") for chat in chats]
    for worker in workers:
        assert finished(worker)[0]["reply"] == "Done: 5"
    assert stats(guarded) == {"registrations": 1, "codes": 1, "refreshes": 1, "add_runs": 4}
    renewed = await store.oauth.credentials(guarded)
    assert renewed.tokens is not None and renewed.tokens["access_token"] != kept.tokens["access_token"]
    assert renewed.version == kept.version + 2  # the expiry written above, then the one refresh


async def test_tokens_are_kept_per_server_and_user_and_one_process_claims_a_refresh(
    store: Store,
    database_url: str,  # noqa: F811
) -> None:
    ann = StoredTokens(store, "http://mcp", user="ann")
    await ann.set_tokens(OAuthToken(access_token="a1", refresh_token="r1", expires_in=60))
    await ann.set_client_info(OAuthClientInformationFull(client_id="tarry-1", redirect_uris=["http://cb/"]))
    assert await StoredTokens(store, "http://mcp").get_tokens() is None  # everyone's login is another row
    assert await StoredTokens(store, "http://other").get_tokens() is None
    async with Store(database_url) as other_process:
        again = StoredTokens(other_process, "http://mcp", user="ann")
        kept = await again.get_tokens()
        assert kept is not None and (kept.access_token, kept.refresh_token) == ("a1", "r1")
        info = await again.get_client_info()
        assert info is not None and info.client_id == "tarry-1"
        assert again.expires_at is not None and not again.expired() and again.expired(margin=61)

        assert await store.oauth.claim_refresh("http://mcp", "ann", seconds=30)
        assert not await other_process.oauth.claim_refresh("http://mcp", "ann", seconds=30)
        await other_process.oauth.release_refresh("http://mcp", "ann")  # not its claim: nothing changes
        assert not await other_process.oauth.claim_refresh("http://mcp", "ann", seconds=30)
        await store.oauth.release_refresh("http://mcp", "ann")
        assert await other_process.oauth.claim_refresh("http://mcp", "ann", seconds=30)
        await again.set_tokens(OAuthToken(access_token="a2", refresh_token="r2", expires_in=60))  # ends the claim
        assert await store.oauth.claim_refresh("http://mcp", "ann", seconds=30)
    renewed = await ann.get_tokens()
    assert renewed is not None and renewed.access_token == "a2" and ann.version == 2
    with pytest.raises(ValueError, match="server"):
        StoredTokens(store, "")


@pytest.fixture
def impostor() -> Iterator[str]:
    """An OAuth-protected SDK server whose redirects name another issuer (``iss``) than the one it advertises."""
    with http_server([sys.executable, str(SERVERS / "oauth_server.py"), "{port}", "https://evil.example"]) as url:
        yield url


async def test_a_login_answered_by_another_issuer_is_refused_and_the_next_attempt_says_why(
    store: Store, impostor: str, inbox: Inbox
) -> None:
    server = MCPServer(url=impostor, name="guarded", auth=OAuthLogin(store, impostor, redirect_uri=inbox.callback))
    chat = await store.create_chat(model=model(), tools=[server])
    assert await chat.ask("What is 2 + 3?") is None and chat.waiting
    [question] = await chat.pending_questions()
    assert question.url is not None
    status, page, _ = await browse(question.url)
    assert status == 400 and "Logged in" not in page and "Login refused" in page
    assert html.unescape(page).count("'https://evil.example', not from 'http://127.0.0.1:") == 1
    assert (await store.oauth.credentials(impostor)).tokens is None  # nothing kept as logged in
    with pytest.raises(
        ConnectionError, match=re.escape("was refused: the answer came from the issuer 'https://evil.example'")
    ) as raised:
        await chat.complete()
    refused = raised.value.__cause__
    assert isinstance(refused, LoginRefusedError) and refused.server == impostor
    assert stats(impostor)["codes"] == 0  # the code was never exchanged
    assert await chat.complete() is None and chat.waiting  # the next attempt asks for a new login
    [again] = await chat.pending_questions()
    assert again.id != question.id and again.url != question.url
    await server.close()


async def test_the_callback_refuses_unknown_used_and_expired_logins(store: Store) -> None:
    app = create_app(store)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://inbox") as client:
        unknown = await client.get("/oauth/callback", params={"state": "forged", "code": "x"})
        assert unknown.status_code == 404 and "Unknown login" in unknown.text

        await store.oauth.begin_login("http://mcp", "", state="s1", code_verifier="v" * 43, ttl=60)
        first = await client.get("/oauth/callback", params={"state": "s1", "code": "c1"})
        again = await client.get("/oauth/callback", params={"state": "s1", "code": "c2"})
        assert (first.status_code, again.status_code) == (200, 409)
        taken = await store.oauth.take_code("http://mcp", "")
        assert taken is not None and (taken.code, taken.code_verifier) == ("c1", "v" * 43)
        assert await store.oauth.take_code("http://mcp", "") is None  # a code is used once

        await store.oauth.begin_login("http://mcp", "", state="s2", code_verifier="w" * 43, ttl=60)
        advance_clock(61)
        expired = await client.get("/oauth/callback", params={"state": "s2", "code": "c3"})
        assert expired.status_code == 410 and "expired" in expired.text
        refused = await client.get("/oauth/callback", params={"state": "s2", "error": "access_denied"})
        assert refused.status_code == 400 and "access_denied" not in refused.text  # no login waits: no text shown


async def test_the_standalone_callback_listens_on_loopback(store: Store) -> None:
    async with serve_callback(store, port=free_port()) as redirect_uri:
        assert redirect_uri.startswith("http://127.0.0.1:")
        await store.oauth.begin_login("http://mcp", "ann", state="s", code_verifier="v" * 43, ttl=60)
        async with httpx.AsyncClient() as client:
            page = await client.get(redirect_uri, params={"state": "s", "code": "c"})
        assert page.status_code == 200 and "Logged in" in page.text
        assert await store.oauth.take_code("http://mcp", "") is None  # another identity's login
        assert await store.oauth.take_code("http://mcp", "ann") is not None


def test_the_page_example_runs(guarded: str, tmp_path: Path) -> None:
    page = (ROOT / "docs" / "mcp.md").read_text()
    example = re.findall(r"```python\n(.*?)```", page, re.S)[2]
    assert "OAuthLogin" in example
    port = free_port()
    example = example.replace("http://127.0.0.1:8765/mcp", guarded).replace("8976", str(port))
    done = subprocess.run(
        [sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "url None Log in to guarded so the chat can use its tools.",
        "5",
        "url Log in to guarded so that the add call can go on.",
        "5",
    ]


def test_login_required_keeps_its_url_through_pickling() -> None:
    url = "http://as/authorize?state=s"
    raised = pickle.loads(pickle.dumps(LoginRequired("http://mcp", url, "s", 60.0)))
    assert (raised.server, raised.url, raised.state, raised.ttl) == ("http://mcp", url, "s", 60.0)
    assert "http://as" not in str(raised)  # the message names the server, never the login URL (it is logged)
