"""The JSON API through Starlette's TestClient: every status code, problem documents, authorize, on_answer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi import FastAPI
from starlette.requests import HTTPConnection, Request
from starlette.testclient import TestClient

from tarry.questions import Question
from tests.deadline import finishes
from tests.store.conftest import _postgres_schema_url
from tests.web.client import AUTH, PROBLEM, TOKEN, Inbox, problem
from tests.web.tools import call, park, pending, question, setup


def test_questions_are_listed_oldest_first_and_filtered_by_chat(inbox: Inbox) -> None:
    first = park(inbox.url, call("refund", order="A1", amount=1))
    second = park(inbox.url, call("book_table", restaurant="Roma"))
    listed = inbox.client.get("/api/questions", headers=AUTH)
    assert listed.status_code == 200
    assert [item["chat_id"] for item in listed.json()] == [first, second]
    approval = listed.json()[0]
    assert approval["kind"] == "approval"
    assert approval["tool_call"]["name"] == "refund"
    assert approval["tool_call"]["arguments"] == {"order": "A1", "amount": 1}
    only = inbox.client.get("/api/questions", params={"chat_id": second}, headers=AUTH).json()
    assert [item["chat_id"] for item in only] == [second]
    assert only[0]["requested_schema"]["properties"]["party"]["maximum"] == 12


def test_questions_come_a_page_at_a_time_with_a_link_to_the_next(inbox: Inbox) -> None:
    chats = [park(inbox.url, call("refund", order=f"A{number}", amount=number)) for number in range(3)]
    first = inbox.client.get("/api/questions", params={"limit": 2}, headers=AUTH)
    assert [item["chat_id"] for item in first.json()] == chats[:2]
    assert first.links["next"]["url"].startswith("/api/questions?limit=2&cursor=")
    last = inbox.client.get(first.links["next"]["url"], headers=AUTH)
    assert [item["chat_id"] for item in last.json()] == chats[2:]
    assert "link" not in last.headers
    only = inbox.client.get("/api/questions", params={"limit": 1, "chat_id": chats[1]}, headers=AUTH)
    assert [item["chat_id"] for item in only.json()] == [chats[1]] and "link" not in only.headers
    refused = problem(inbox.client.get("/api/questions", params={"cursor": "nonsense"}, headers=AUTH), 400)
    assert "nonsense" in refused["detail"]
    problem(inbox.client.get("/api/questions", params={"limit": 0}, headers=AUTH), 400)


def test_one_question_is_read_by_id_and_an_unknown_id_is_404(inbox: Inbox) -> None:
    chat = park(inbox.url, call("refund", order="A1", amount=1))
    [asked] = pending(inbox.url, chat)
    read = inbox.client.get(f"/api/questions/{asked.id}", headers=AUTH)
    assert read.status_code == 200
    assert read.json()["id"] == asked.id and read.json()["decision"] is None
    problem(inbox.client.get("/api/questions/no-such-id", headers=AUTH), 404)
    problem(inbox.client.post("/api/questions/no-such-id/approve", headers=AUTH), 404)


def test_answering_records_the_values_then_a_second_decision_is_409(inbox: Inbox) -> None:
    chat = park(inbox.url, call("book_table", restaurant="Roma"))
    [asked] = pending(inbox.url, chat)
    answered = inbox.client.post(
        f"/api/questions/{asked.id}/answer",
        json={"time": "19:00", "party": "3", "email": "a@example.com", "unasked": 1},
        headers=AUTH,
    )
    assert answered.status_code == 200
    body = answered.json()
    assert body["recorded"] is True
    assert body["question"]["answer"] == {
        "time": "19:00",
        "party": 3,
        "email": "a@example.com",
        "terrace": False,
        "wine": "red",
    }
    assert [decided.id for decided in inbox.answered] == [asked.id]
    assert inbox.answered[0].decision == "accept"
    assert inbox.hooked == [asked.id]  # the store's decision hooks ran once

    again = problem(inbox.client.post(f"/api/questions/{asked.id}/decline", json={"note": "no"}, headers=AUTH), 409)
    assert again["question_id"] == asked.id
    assert question(inbox.url, asked.id).note is None
    assert len(inbox.answered) == 1


def test_an_invalid_answer_is_400_with_each_field_and_records_nothing(inbox: Inbox) -> None:
    chat = park(inbox.url, call("book_table", restaurant="Roma"))
    [asked] = pending(inbox.url, chat)
    response = inbox.client.post(f"/api/questions/{asked.id}/answer", json={"time": "18:00", "party": 99}, headers=AUTH)
    body = problem(response, 400)
    assert set(body["errors"]) == {"time", "party", "email"}
    assert "not one of the choices" in body["errors"]["time"]
    assert question(inbox.url, asked.id).decision is None
    # A body that is not an object is a 400 too, not a 422.
    assert set(problem(inbox.client.post(f"/api/questions/{asked.id}/answer", json=[1], headers=AUTH), 400))


def test_approve_and_decline_with_a_note(inbox: Inbox) -> None:
    chat = park(inbox.url, call("refund", order="A1", amount=1), call("refund", order="A2", amount=2))
    first, second = pending(inbox.url, chat)
    approved = inbox.client.post(f"/api/questions/{first.id}/approve", headers=AUTH)
    assert approved.status_code == 200 and approved.json()["question"]["decision"] == "accept"
    declined = inbox.client.post(f"/api/questions/{second.id}/decline", json={"note": "not today"}, headers=AUTH)
    assert declined.status_code == 200
    assert (declined.json()["question"]["decision"], declined.json()["question"]["note"]) == ("decline", "not today")
    assert question(inbox.url, second.id).note == "not today"


def test_respond_gives_the_result_in_the_tools_place_and_refuses_what_is_no_calls_approval(inbox: Inbox) -> None:
    chat = park(inbox.url, call("refund", order="A1", amount=1), call("book_table", restaurant="Roma"))
    approval, form = pending(inbox.url, chat)
    given = {"refunded": False, "why": "the customer took a voucher"}
    responded = inbox.client.post(f"/api/questions/{approval.id}/respond", json={"result": given}, headers=AUTH)
    assert responded.status_code == 200, responded.text
    body = responded.json()["question"]
    assert (body["decision"], body["answer"], body["channel"]) == ("respond", {"result": given}, "api")
    assert [decided.decision for decided in inbox.answered] == ["respond"]
    assert inbox.hooked == [approval.id]
    history = inbox.client.get("/api/history", params={"question_id": approval.id}, headers=AUTH).json()
    assert [(event["decision"], event["answer"]) for event in history] == [("respond", {"result": given})]

    late = inbox.client.post(f"/api/questions/{approval.id}/respond", json={"result": "again"}, headers=AUTH)
    assert problem(late, 409)["question_id"] == approval.id
    refused = problem(inbox.client.post(f"/api/questions/{form.id}/respond", json={"result": "x"}, headers=AUTH), 400)
    assert "form question of the book_table call" in refused["detail"] and set(refused["errors"]) == {"result"}
    problem(inbox.client.post(f"/api/questions/{form.id}/respond", json={"value": "x"}, headers=AUTH), 400)
    problem(inbox.client.post(f"/api/questions/{form.id}/respond", headers=AUTH), 400)
    assert question(inbox.url, form.id).decision is None
    null = inbox.client.post(f"/api/questions/{approval.id}/respond", json={"result": None}, headers=AUTH)
    assert null.status_code == 409, "JSON's null is a result, and this approval has one already"


def test_an_expired_question_is_410(inbox: Inbox) -> None:
    chat = park(inbox.url, call("confirm", ttl=0.2))
    [asked] = pending(inbox.url, chat)
    assert asked.expires_at is not None
    deadline = time.monotonic() + 10
    while datetime.now(UTC) < asked.expires_at:  # wait for the clock, with a deadline
        assert time.monotonic() < deadline
        time.sleep(0.05)
    problem(inbox.client.post(f"/api/questions/{asked.id}/answer", json={"ok": True}, headers=AUTH), 410)
    assert inbox.client.get("/api/questions", headers=AUTH).json() == []


def test_tasks_list_their_status_message_and_since_when(inbox: Inbox) -> None:
    chat = park(inbox.url, call("render", pages=7))
    tasks = inbox.client.get("/api/tasks", headers=AUTH)
    assert tasks.status_code == 200
    [task] = tasks.json()
    assert task["chat_id"] == chat
    assert (task["status"], task["status_message"], task["poll_interval"]) == ("working", "Rendering page 3 of 7", 30)
    assert task["tool_call"]["arguments"] == {"pages": 7}
    assert datetime.fromisoformat(task["since"]) <= datetime.now(UTC)
    assert inbox.client.get("/api/tasks", params={"chat_id": "other"}, headers=AUTH).json() == []


def test_without_the_token_everything_is_401_and_cookie_posts_need_json_or_a_csrf_header(inbox: Inbox) -> None:
    chat = park(inbox.url, call("refund", order="A1", amount=1))
    [asked] = pending(inbox.url, chat)
    problem(inbox.client.get("/api/questions"), 401)
    problem(inbox.client.get("/api/tasks", headers={"Authorization": "Bearer wrong"}), 401)
    problem(inbox.client.post(f"/api/questions/{asked.id}/approve"), 401)
    page = inbox.client.get("/")
    assert page.status_code == 401 and "Log in" in page.text

    login = inbox.client.get(f"/login?token={TOKEN}", follow_redirects=False)
    assert login.status_code == 303
    assert "tarry_session_80" in login.cookies  # the port is in the name: cookies ignore ports
    # Logged in by cookie, a plain form post to the API could be forged: refused.
    forged = inbox.client.post(f"/api/questions/{asked.id}/approve", data={"x": "y"})
    problem(forged, 403)
    cross = inbox.client.post(f"/api/questions/{asked.id}/approve", json={}, headers={"Sec-Fetch-Site": "cross-site"})
    problem(cross, 403)
    assert question(inbox.url, asked.id).decision is None
    assert inbox.client.post(f"/api/questions/{asked.id}/approve", json={}).status_code == 200


def test_authorize_decides_per_question_and_for_the_inbox(database_url: str) -> None:
    setup(database_url)
    mine = park(database_url, call("refund", order="mine", amount=1))
    theirs = park(database_url, call("refund", order="theirs", amount=1))
    [their_question] = pending(database_url, theirs)
    seen: list[str | None] = []

    async def authorize(request: Request, asked: Question | None) -> bool:
        seen.append(None if asked is None else asked.id)
        if request.headers.get("x-user") != "ada":
            return False
        return asked is None or asked.chat_id == mine

    inbox = Inbox(database_url, authorize=authorize)
    assert inbox.app.state.token is None
    with inbox.client as client:
        headers = {"x-user": "ada"}
        listed = client.get("/api/questions", headers=headers).json()
        assert [item["chat_id"] for item in listed] == [mine]
        problem(client.get(f"/api/questions/{their_question.id}", headers=headers), 403)
        problem(client.post(f"/api/questions/{their_question.id}/approve", json={}, headers=headers), 403)
        problem(client.get("/api/questions", headers={"x-user": "eve"}), 403)
        assert client.get("/", headers={"x-user": "eve"}).status_code == 403
        page = client.get("/", headers=headers)
        assert page.status_code == 200 and "mine" in page.text and "theirs" not in page.text
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]
    assert None in seen and their_question.id in seen
    assert question(database_url, their_question.id).decision is None


def test_the_app_mounts_under_a_prefix_of_a_host_app(database_url: str) -> None:
    chat = park(database_url, call("refund", order="A1", amount=1))
    [asked] = pending(database_url, chat)
    inbox = Inbox(database_url)
    host = FastAPI()
    host.mount("/inbox", inbox.app)
    with TestClient(host, base_url="http://127.0.0.1") as client:
        assert client.get("/inbox/api/questions", headers=AUTH).json()[0]["id"] == asked.id
        login = client.get(f"/inbox/login?token={TOKEN}", follow_redirects=False)
        assert login.headers["location"] == "/inbox/"
        page = client.get("/inbox/")
        assert page.status_code == 200
        assert 'href="/inbox/static/style.css"' in page.text
        assert f'action="/inbox/questions/{asked.id}/approve"' in page.text
        assert client.get("/inbox/static/style.css").status_code == 200
        assert "/api/questions/{question_id}/answer" in client.get("/inbox/api/openapi.json").json()["paths"]
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def test_the_openapi_schema_documents_problems_and_no_422(inbox: Inbox) -> None:
    schema = inbox.client.get("/api/openapi.json").json()
    answer = schema["paths"]["/api/questions/{question_id}/answer"]["post"]
    assert set(answer["responses"]) >= {"200", "400", "401", "403", "404", "409", "410"}
    assert "422" not in answer["responses"]
    assert PROBLEM in answer["responses"]["410"]["content"]
    retry = schema["paths"]["/api/deliveries/{delivery_id}/retry"]["post"]
    assert PROBLEM in retry["responses"]["404"]["content"] and "422" not in retry["responses"]
    assert set(schema["paths"]) == {
        "/api/chats/{chat_id}/approve-all",
        "/api/deliveries",
        "/api/deliveries/{delivery_id}/retry",
        "/api/grants",
        "/api/grants/{grant_id}/revoke",
        "/api/history",
        "/api/questions",
        "/api/questions/{question_id}",
        "/api/questions/{question_id}/answer",
        "/api/questions/{question_id}/approve",
        "/api/questions/{question_id}/decline",
        "/api/questions/{question_id}/respond",
        "/api/tasks",
    }


def test_pages_carry_a_strict_content_security_policy(inbox: Inbox) -> None:
    response = inbox.client.get("/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"


def test_an_answer_to_a_pattern_that_backtracks_exponentially_is_refused_at_once(database_url: str) -> None:
    # In a process of its own: a backtracking engine holds the GIL, so only a process can be timed out.
    printed = finishes(
        f"""
from tests.web.client import AUTH, Inbox
from tests.web.tools import call, park, pending
url = {database_url!r}
[asked] = pending(url, park(url, call("slug", title="Tea")))
inbox = Inbox(url)
with inbox.client:
    answer = f"/api/questions/{{asked.id}}/answer"
    refused = inbox.client.post(answer, json={{"slug": "a" * 60 + "!"}}, headers=AUTH)
    print(refused.status_code, refused.json()["errors"]["slug"])
    accepted = inbox.client.post(answer, json={{"slug": "tea for two"}}, headers=AUTH)
    print(accepted.status_code, accepted.json()["question"]["answer"])
    inbox.client.portal.call(inbox.store.close)
"""
    )
    refused, accepted = printed.splitlines()
    assert refused.startswith("400 ") and "does not match the pattern" in refused
    assert accepted == "200 {'slug': 'tea for two'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def any_database(request: pytest.FixtureRequest, database_url: str) -> Iterator[str]:
    """The test's SQLite file, then a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        yield database_url
    else:
        yield from _postgres_schema_url()


def test_text_no_database_can_hold_and_identities_too_long_are_400s_naming_them(any_database: str) -> None:
    def identify(request: HTTPConnection) -> str | None:
        return request.headers.get("x-user")

    chat = park(any_database, call("code", order="A1"))
    [asked] = pending(any_database, chat)
    inbox = Inbox(any_database, identify=identify)
    as_json = {**AUTH, "content-type": "application/json"}
    with inbox.client as client:
        for escaped, said in (("\\ud800", "lone surrogate (U+D800)"), ("\\u0000", "NUL")):
            answer = f'{{"code": "abc", "remark": "a{escaped}b"}}'  # raw: httpx cannot encode a lone surrogate
            refused = problem(client.post(f"/api/questions/{asked.id}/answer", content=answer, headers=as_json), 400)
            assert said in refused["errors"]["remark"]
            note = f'{{"note": "a{escaped}b"}}'
            refused = problem(client.post(f"/api/questions/{asked.id}/decline", content=note, headers=as_json), 400)
            assert [key for key in refused["errors"] if key.endswith("note")], refused  # pydantic's, or tarry's
        path = f"/api/questions/{asked.id}/answer"
        long = problem(client.post(path, json={"code": "abc"}, headers={**AUTH, "x-user": "u" * 201}), 400)
        assert "at most 200 characters" in long["detail"] and long["errors"]["identity"] == long["detail"]
        assert client.get("/", headers={**AUTH, "x-user": "u" * 201}).status_code == 200  # the page still shows
        assert client.get("/api/history", headers=AUTH).json() == []  # nothing was recorded
        answered = client.post(path, json={"code": "abc", "remark": "fine"}, headers={**AUTH, "x-user": "u" * 200})
        assert answered.status_code == 200, answered.text
        [event] = client.get("/api/history", headers=AUTH).json()
        assert event["by"]["id"] == "u" * 200 and event["answer"] == {"code": "abc", "remark": "fine"}
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def test_a_question_without_fields_is_shown_and_waits_for_an_explicit_accept(inbox: Inbox) -> None:
    chat = park(inbox.url, call("proceed", target="production"))
    [asked] = pending(inbox.url, chat)
    assert asked.kind == "form" and asked.fields == ()
    page = inbox.client.get("/", headers=AUTH).text
    shown = page[page.index(f'id="q-{asked.id}"') :]
    assert '<button type="submit" class="primary">Accept</button>' in shown[: shown.index("</li>")]
    listed = inbox.client.get("/api/questions", headers=AUTH).json()
    assert [item["id"] for item in listed] == [asked.id]
    assert question(inbox.url, asked.id).decision is None  # shown and listed, not taken as answered
    accepted = inbox.client.post(f"/api/questions/{asked.id}/answer", json={}, headers=AUTH)
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["question"]["decision"] == "accept"
