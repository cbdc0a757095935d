"""Who decided, through the inbox: the token's fixed name, an identify hook, policy refusals as 403s, the trail."""

from __future__ import annotations

import re

from starlette.requests import HTTPConnection

from tarry.principals import Principal
from tarry.questions import SECRET
from tarry.store import Store
from tarry.testing import ScriptedModel
from tests.store.approvers import FINANCE, Payout, Unlock, may_decide
from tests.web.client import AUTH, Inbox, problem
from tests.web.tools import call, park, pending, run

NO_FOLLOW_UPS = {"remind_after": None, "escalate_after": None, "escalate_to": [], "on_timeout": "expire"}
"""What the JSON of a policy without follow-ups says of them."""


def park_payout(url: str) -> str:
    async def parked() -> str:
        async with Store(url) as store:
            chat = await store.create_chat(
                ScriptedModel([[call("payout", to="Carol", amount=900)], "Paid."]), [Payout()]
            )
            await chat.ask("Pay Carol 900")
            return chat.id

    return run(parked)


def test_a_decision_with_the_login_token_is_recorded_as_the_token_holder(inbox: Inbox) -> None:
    chat = park(inbox.url, call("refund", order="A7", amount=5))
    [approval] = pending(inbox.url, chat)
    decided = inbox.client.post(f"/api/questions/{approval.id}/approve", headers=AUTH)
    assert decided.status_code == 200, decided.text
    body = decided.json()["question"]
    assert body["decided_by"] == {"id": "inbox-token", "name": "Inbox token holder"} and body["channel"] == "api"
    [event] = inbox.client.get("/api/history", params={"chat_id": chat}, headers=AUTH).json()
    assert (event["outcome"], event["decision"], event["channel"]) == ("decided", "accept", "api")
    assert event["by"]["id"] == "inbox-token" and event["tool_call"]["arguments"] == {"order": "A7", "amount": 5}
    page = inbox.client.get(f"/chats/{chat}", headers=AUTH).text
    assert "Approved" in page and '<span class="decider">Inbox token holder</span>' in page and "via api" in page


def test_identify_names_the_decider_and_a_policy_refusal_is_a_403(database_url: str) -> None:
    def identify(request: HTTPConnection) -> Principal | None:
        user = request.headers.get("x-user")
        return None if user is None else Principal(user, FINANCE.get(user))

    inbox = Inbox(database_url, authorize=lambda request, item: True, identify=identify)
    inbox.store.may_decide = may_decide
    from tests.web.tools import setup

    setup(database_url)
    chat = park_payout(database_url)
    [approval] = pending(database_url, chat)
    path = f"/api/questions/{approval.id}/approve"
    as_json = {"content-type": "application/json"}
    with inbox.client as client:
        refused = problem(client.post(path, headers={**as_json, "x-user": "mallory"}), 403)
        assert refused["detail"] == "mallory may not decide the payout call (it needs 'finance')"
        counted = client.post(path, headers={**as_json, "x-user": "ann"})
        assert counted.status_code == 200, counted.text
        question = counted.json()["question"]
        assert question["decision"] is None
        assert question["policy"] == {"count": 2, "by": "finance", "grant_suffices": False, **NO_FOLLOW_UPS}
        assert [vote["by"]["id"] for vote in question["votes"]] == ["ann"]
        twice = problem(client.post(path, headers={**as_json, "x-user": "ann"}), 403)
        assert "Ann Archer already approved the payout call" in twice["detail"]
        assert inbox.answered == []  # nothing decided yet, so on_answer has not run
        decided = client.post(path, headers={**as_json, "x-user": "bob"})
        assert decided.json()["question"]["decided_by"] == {"id": "bob", "name": "Bob Baker"}
        assert [question.id for question in inbox.answered] == [approval.id]
        history = client.get("/api/history", params={"question_id": approval.id}).json()
        assert [(event["outcome"], event["by"]["id"]) for event in history] == [
            ("refused", "mallory"),
            ("counted", "ann"),
            ("refused", "ann"),
            ("decided", "bob"),
        ]
        assert [event["id"] for event in client.get("/api/history", params={"after": history[1]["id"]}).json()] == [
            history[2]["id"],
            history[3]["id"],
        ]
        page = client.get(f"/chats/{chat}").text
        assert "(one of several approvals)" in page and "Ann Archer" in page and "Bob Baker" in page
        client.portal.call(inbox.store.close)  # type: ignore[union-attr]


def test_a_secret_field_is_typed_unseen_and_stays_out_of_what_the_api_shows(inbox: Inbox) -> None:
    async def parked() -> str:
        async with Store(inbox.url) as store:
            chat = await store.create_chat(ScriptedModel([[call("unlock", vault="north")], "Open."]), [Unlock()])
            await chat.ask("Open the north vault")
            return chat.id

    chat = run(parked)
    [question] = pending(inbox.url, chat)
    page = inbox.client.get("/", headers=AUTH).text
    assert re.search(r'<input type="password" id="[^"]+" name="field:pin"', page), "the PIN is not typed unseen"
    answered = inbox.client.post(
        f"/api/questions/{question.id}/answer", json={"pin": "480175", "reason": "audit"}, headers=AUTH
    )
    assert answered.status_code == 200, answered.text
    assert answered.json()["question"]["answer"] == {"pin": SECRET, "reason": "audit"}
    assert "480175" not in inbox.client.get("/api/history", headers=AUTH).text
