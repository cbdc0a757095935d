"""``POST /api/questions/{id}/approve`` with ``{"arguments": {...}}``: approving a call with changed arguments through
the JSON API, on a SQLite file and on PostgreSQL."""

from __future__ import annotations

from tarry.edits import arguments_digest
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


def test_an_approval_for_arguments_changed_since_they_were_read_is_409_and_records_nothing(any_inbox: Inbox) -> None:
    chat = park(any_inbox.url, call("refund", order="A1", amount=30))
    [asked] = pending(any_inbox.url, chat)
    read = any_inbox.client.get(f"/api/questions/{asked.id}", headers=AUTH).json()
    assert read["proposal_digest"] == arguments_digest({"order": "A1", "amount": 30})
    listed = any_inbox.client.get("/api/questions", params={"chat_id": chat}, headers=AUTH).json()
    assert [question["proposal_digest"] for question in listed] == [read["proposal_digest"]]

    url = f"/api/questions/{asked.id}/approve"
    other = arguments_digest({"order": "A1", "amount": 3})  # what a page showing another person's change would send
    stale = problem(any_inbox.client.post(url, json={"seen": other}, headers=AUTH), 409)
    assert "changed since you saw them" in stale["detail"] and '"amount": 30' in stale["detail"]
    assert stale["question_id"] == asked.id
    history = any_inbox.client.get("/api/history", params={"question_id": asked.id}, headers=AUTH).json()
    assert [event["outcome"] for event in history] == ["refused"]
    assert any_inbox.client.get(f"/api/questions/{asked.id}", headers=AUTH).json()["decision"] is None
    bad = problem(any_inbox.client.post(url, json={"seen": "not a digest"}, headers=AUTH), 400)
    assert "64 lowercase hexadecimal digits" in bad["detail"]

    done = any_inbox.client.post(url, json={"seen": read["proposal_digest"]}, headers=AUTH)
    assert done.status_code == 200, done.text
    assert done.json()["question"]["decision"] == "accept"


def test_a_response_with_seen_is_refused_when_the_arguments_are_not_those_shown(any_inbox: Inbox) -> None:
    chat = park(any_inbox.url, call("refund", order="A1", amount=30))
    [asked] = pending(any_inbox.url, chat)
    url = f"/api/questions/{asked.id}/respond"
    other = arguments_digest({"order": "A1", "amount": 3})
    stale = problem(any_inbox.client.post(url, json={"result": "refunded by hand", "seen": other}, headers=AUTH), 409)
    assert "changed since you saw them" in stale["detail"] and stale["question_id"] == asked.id
    history = any_inbox.client.get("/api/history", params={"question_id": asked.id}, headers=AUTH).json()
    assert [(event["decision"], event["outcome"]) for event in history] == [("respond", "refused")]
    bad = problem(any_inbox.client.post(url, json={"result": "x", "seen": "abc"}, headers=AUTH), 400)
    assert "64 lowercase hexadecimal digits" in bad["detail"]
    assert any_inbox.client.get(f"/api/questions/{asked.id}", headers=AUTH).json()["decision"] is None

    shown = {"result": "refunded by hand", "seen": asked.proposal_digest}
    done = any_inbox.client.post(url, json=shown, headers=AUTH)
    assert done.status_code == 200, done.text
    assert done.json()["question"]["answer"] == {"result": "refunded by hand"}
