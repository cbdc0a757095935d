"""``POST /api/questions/{id}/approve`` with ``{"arguments": {...}}``: approving a call with changed arguments through
the JSON API, on a SQLite file and on PostgreSQL."""

from __future__ import annotations

from tests.web.client import AUTH, Inbox, problem
from tests.web.tools import call, park, pending


def test_an_approval_with_changed_arguments_is_checked_then_recorded(any_inbox: Inbox) -> None:
    chat = park(any_inbox.url, call("refund", order="A1", amount=30))
    [asked] = pending(any_inbox.url, chat)
    read = any_inbox.client.get(f"/api/questions/{asked.id}", headers=AUTH).json()
    assert set(read["editable"]["properties"]) == {"order", "amount", "reason"}
    assert read["proposal"] == {"order": "A1", "amount": 30}

    url = f"/api/questions/{asked.id}/approve"
    wrong = problem(
        any_inbox.client.post(url, json={"arguments": {"amount": "thirty", "colour": "red"}}, headers=AUTH), 400
    )
    assert wrong["errors"]["amount"] == "'thirty' is not of type 'integer'"
    assert wrong["errors"]["colour"] == "the refund tool does not let a person change colour"
    odd = problem(any_inbox.client.post(url, json={"arguments": [1]}, headers=AUTH), 400)
    assert odd["errors"] == {"body.arguments": "Input should be a valid dictionary"}

    done = any_inbox.client.post(url, json={"arguments": {"amount": 3, "reason": "damaged"}}, headers=AUTH)
    assert done.status_code == 200, done.text
    question = done.json()["question"]
    assert question["decision"] == "accept"
    assert question["answer"] == {"arguments": {"order": "A1", "amount": 3, "reason": "damaged"}}
    assert question["proposal"] == question["answer"]["arguments"]
    assert question["tool_call"]["arguments"] == {"order": "A1", "amount": 30}, "the call as the model made it"


def test_an_approval_without_a_body_or_with_no_changes_approves_as_it_stands(any_inbox: Inbox) -> None:
    chat = park(any_inbox.url, call("refund", order="A1", amount=30), call("refund", order="A2", amount=40))
    [first, second] = pending(any_inbox.url, chat)
    assert any_inbox.client.post(f"/api/questions/{first.id}/approve", headers=AUTH).json()["question"]["answer"] == {}
    empty = any_inbox.client.post(f"/api/questions/{second.id}/approve", json={"arguments": {}}, headers=AUTH)
    assert empty.status_code == 200 and empty.json()["question"]["answer"] == {}
