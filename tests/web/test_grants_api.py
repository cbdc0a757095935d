"""Standing grants through the JSON API, on SQLite and PostgreSQL: made, listed and revoked as the person the inbox
identifies, also along with an approval; a grant approves matching calls at once; the shared token cannot grant;
the inbox's grants page revokes under the API's rule."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.requests import HTTPConnection

from tarry.principals import Principal
from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.web.client import AUTH, TOKEN, Inbox, problem
from tests.web.tools import TOOLS, call, pending, run

AS_JSON = {"content-type": "application/json"}


def ask_refund(url: str, amount: int) -> tuple[str, bool]:
    """A stored chat whose model asks to refund ``amount``: its id, and whether the call still waits."""

    async def asked() -> tuple[str, bool]:
        async with Store(url) as store:
            chat = await store.create_chat(ScriptedModel([[call("refund", order="A1", amount=amount)], "Done."]), TOOLS)
            await chat.ask("Refund it")
            return chat.id, chat.waiting

    return run(asked)


@pytest.fixture
def identified(any_database: str) -> Iterator[Inbox]:
    """An inbox that knows who asks from the ``x-user`` header (verified, as a host app's login would be)."""

    def identify(request: HTTPConnection) -> Principal | None:
        user = request.headers.get("x-user")
        return None if user is None else Principal(user)

    inbox = Inbox(any_database, authorize=lambda request, item: True, identify=identify)
    with inbox.client:
        yield inbox
        inbox.client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def test_a_grant_made_through_the_api_approves_matching_calls_until_revoked(identified: Inbox) -> None:
    client, ada = identified.client, {**AS_JSON, "x-user": "ada"}
    made = client.post("/api/grants", json={"tool": "refund", "within": {"amount": [0, 10]}, "ttl": 3600}, headers=ada)
    assert made.status_code == 201, made.text
    grant = made.json()
    assert (grant["tool"], grant["scope"], grant["granted_by"]) == ("refund", "everywhere", {"id": "ada", "name": None})
    assert grant["constraints"] == [{"name": "amount", "equal": None, "min": 0.0, "max": 10.0}]
    assert [listed["id"] for listed in client.get("/api/grants", headers=ada).json()] == [grant["id"]]
    chat, waiting = ask_refund(identified.url, 5)
    assert not waiting
    [event] = client.get("/api/history", params={"chat_id": chat}, headers=ada).json()
    assert (event["channel"], event["outcome"], event["detail"]) == ("grant", "decided", f"grant {grant['id']}")
    assert ask_refund(identified.url, 50)[1]  # outside the bounds: a person decides
    revoked = client.post(f"/api/grants/{grant['id']}/revoke", headers={**ada, "x-user": "bob"})
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["revoked_by"] == {"id": "bob", "name": None}
    assert client.get("/api/grants", headers=ada).json() == []
    assert len(client.get("/api/grants", params={"include_ended": "true"}, headers=ada).json()) == 1
    assert ask_refund(identified.url, 5)[1]


def test_bad_grants_are_refused_with_problems(identified: Inbox) -> None:
    client, ada = identified.client, {**AS_JSON, "x-user": "ada"}
    reversed_bounds = problem(
        client.post("/api/grants", json={"tool": "refund", "within": {"amount": [9, 1]}}, headers=ada), 400
    )
    assert "reversed" in reversed_bounds["detail"]
    problem(client.post("/api/grants", json={"tool": "refund", "chat_id": "c", "agent": "a"}, headers=ada), 400)
    problem(client.post("/api/grants", json={"tool": "refund", "chat_id": "no-such-chat"}, headers=ada), 404)
    problem(client.post("/api/grants", json={"tool": "refund"}, headers=AS_JSON), 403)  # nobody identified
    problem(client.post("/api/grants/no-such-grant/revoke", headers=ada), 404)
    assert client.get("/api/grants", params={"include_ended": "true"}, headers=ada).json() == []


def test_the_shared_token_cannot_grant(any_database: str) -> None:
    inbox = Inbox(any_database)
    with inbox.client as client:
        refused = problem(client.post("/api/grants", json={"tool": "refund"}, headers={**AUTH, **AS_JSON}), 403)
        assert "self-declared" in refused["detail"]
        assert client.get("/api/grants", headers=AUTH).json() == []
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "the page has no CSRF token"
    return found.group(1)


def test_the_inbox_approves_and_allows_the_tool_in_the_conversation_for_an_hour(identified: Inbox) -> None:
    client, ada = identified.client, {"x-user": "ada"}
    chat, waiting = ask_refund(identified.url, 5)
    assert waiting
    [asked] = pending(identified.url, chat)
    page = client.get("/", headers=ada).text
    assert 'name="allow" value="chat-hour"' in page and "allow refund in this conversation for an hour" in page
    done = client.post(
        f"/questions/{asked.id}/approve",
        data={"csrf_token": csrf_of(page), "allow": "chat-hour"},
        headers={**ada, "Origin": "http://127.0.0.1"},
        follow_redirects=False,
    )
    assert done.status_code == 303 and "outcome=allowed" in done.headers["location"], done.text
    assert "allowed in this conversation for an hour" in client.get(done.headers["location"], headers=ada).text
    [grant] = client.get("/api/grants", headers=ada).json()
    assert (grant["chat_id"], grant["question_id"], grant["granted_by"]["id"]) == (chat, asked.id, "ada")
    assert grant["expires_at"] is not None


def test_the_shared_token_is_not_offered_a_grant(any_database: str) -> None:
    inbox = Inbox(any_database)
    with inbox.client as client:
        ask_refund(any_database, 5)
        page = client.get(f"/login?token={TOKEN}").text
        assert "Approve</button>" in page and 'name="allow"' not in page
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def granted_by_ada(url: str) -> str:
    """The id of a grant of every refund, made by Ada."""

    async def made() -> str:
        async with Store(url) as store:
            await store.setup()
            return (await store.grant("refund", by=Principal("ada"))).id

    return run(made)


def test_the_grants_page_refuses_to_revoke_as_nobody_as_the_api_does(any_database: str) -> None:
    grant_id = granted_by_ada(any_database)
    inbox = Inbox(any_database, authorize=lambda request, item: True)  # it says who may see, not who they are
    with inbox.client as client:
        page = client.get("/grants").text
        assert f'data-grant="{grant_id}"' in page
        done = client.post(
            f"/grants/{grant_id}/revoke",
            data={"csrf_token": csrf_of(page)},
            headers={"Origin": "http://127.0.0.1"},
            follow_redirects=False,
        )
        assert done.status_code == 303 and done.headers["location"].endswith("/grants?outcome=nobody"), done.text
        shown = client.get(done.headers["location"]).text
        assert "not revoked: this inbox does not say who you are" in shown and f'data-grant="{grant_id}"' in shown
        problem(client.post(f"/api/grants/{grant_id}/revoke", headers=AS_JSON), 403)
        assert [grant["id"] for grant in client.get("/api/grants").json()] == [grant_id]
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def test_the_grants_page_refuses_an_identity_the_store_cannot_record(any_database: str) -> None:
    grant_id = granted_by_ada(any_database)
    inbox = Inbox(any_database, authorize=lambda request, item: True, identify=lambda request: "x" * 100_000)
    with inbox.client as client:
        page = client.get("/grants").text
        done = client.post(
            f"/grants/{grant_id}/revoke", data={"csrf_token": csrf_of(page)}, headers={"Origin": "http://127.0.0.1"}
        )
        assert "Your identity cannot be recorded, so the grant was not revoked" in done.text
        problem(client.post(f"/api/grants/{grant_id}/revoke", headers=AS_JSON), 400)
        assert [grant["id"] for grant in client.get("/api/grants").json()] == [grant_id]
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def test_the_api_approves_and_allows(identified: Inbox) -> None:
    client, ada = identified.client, {**AS_JSON, "x-user": "ada"}
    chat, _ = ask_refund(identified.url, 5)
    [asked] = pending(identified.url, chat)

    def approve(allow: dict[str, Any]) -> Any:
        return client.post(f"/api/questions/{asked.id}/approve", json={"allow": allow}, headers=ada)

    assert "reversed" in problem(approve({"within": {"amount": [9, 1]}}), 400)["detail"]
    assert "records no agent" in problem(approve({"scope": "agent"}), 400)["detail"]
    assert "body.allow.tl" in problem(approve({"scope": "chat", "tl": 1}), 400)["errors"]
    assert [waiting.id for waiting in pending(identified.url, chat)] == [asked.id], "nothing was recorded"
    assert client.get("/api/grants", headers=ada).json() == []
    done = approve({"scope": "chat", "ttl": 3600})
    assert done.status_code == 200 and done.json()["question"]["decision"] == "accept", done.text
    [grant] = client.get("/api/grants", headers=ada).json()
    assert (grant["tool"], grant["chat_id"], grant["question_id"]) == ("refund", chat, asked.id)
    assert grant["granted_by"]["id"] == "ada" and grant["expires_at"] is not None


def test_the_shared_token_cannot_approve_and_allow(any_database: str) -> None:
    inbox = Inbox(any_database)
    with inbox.client as client:
        chat, _ = ask_refund(any_database, 5)
        [asked] = pending(any_database, chat)
        allow = {"allow": {"ttl": 60}}
        refused = problem(client.post(f"/api/questions/{asked.id}/approve", json=allow, headers=AUTH), 403)
        assert "self-declared" in refused["detail"]
        assert [waiting.id for waiting in pending(any_database, chat)] == [asked.id]
        assert client.get("/api/grants", headers=AUTH).json() == []
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]
