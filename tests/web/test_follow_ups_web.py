"""Follow-ups of a question's policy (an approval's, a tool's question's) as the inbox shows them: the question's
JSON, its card, and the trail's JSON."""

from __future__ import annotations

from typing import Any

from tarry import Tool
from tarry.store import Store
from tarry.testing import ScriptedModel, advance_clock
from tests.store.sweepers import ESCALATE, Booking, Refund
from tests.web.client import AUTH, Inbox
from tests.web.tools import call, run


def parked_and_swept(url: str, tool: Tool, asked: dict[str, Any]) -> tuple[str, str]:
    """A chat whose ``asked`` call of ``tool`` waits on a question its policy reminded and escalated: the chat's id and
    the question's id."""

    async def swept() -> tuple[str, str]:
        async with Store(url) as store:
            chat = await store.create_chat(ScriptedModel([[asked], "Done."]), [tool])
            await chat.ask("Go on")
            [question] = await store.pending_questions(chat.id)
            advance_clock(ESCALATE + 1)
            assert [item.what for item in await store.sweep_reminders()] == ["remind", "escalate"]
            return chat.id, question.id

    return run(swept)


def test_the_inbox_shows_when_a_question_was_reminded_and_escalated(any_inbox: Inbox) -> None:
    chat_id, question_id = parked_and_swept(any_inbox.url, Refund(), call("refund", to="Carol", amount=40))
    body = any_inbox.client.get(f"/api/questions/{question_id}", headers=AUTH).json()
    assert body["reminded_at"] is not None and body["escalated_at"] == body["reminded_at"]
    assert body["escalated_to"] == ["boss"]
    assert body["policy"]["escalate_to"] == ["boss"] and body["policy"]["remind_after"] == 60.0
    assert body["policy"]["on_timeout"] == "expire"

    page = any_inbox.client.get("/", headers=AUTH).text
    assert '<p class="follow-ups">Reminded at <time' in page and "; escalated to boss at <time" in page

    conversation = any_inbox.client.get(f"/chats/{chat_id}", headers=AUTH).text
    assert '<li class="decision decision-remind">Reminded by its policy' in conversation
    assert '<li class="decision decision-escalate">Escalated by its policy (escalated to boss)' in conversation

    events = any_inbox.client.get("/api/history", params={"question_id": question_id}, headers=AUTH).json()
    assert [(event["decision"], event["outcome"], event["channel"]) for event in events] == [
        ("remind", "reminded", "policy"),
        ("escalate", "escalated", "policy"),
    ]
    assert events[1]["detail"] == "escalated to boss" and events[1]["by"] is None


def test_the_inbox_shows_a_form_question_reminded_and_escalated_by_its_policy(any_inbox: Inbox) -> None:
    chat_id, question_id = parked_and_swept(any_inbox.url, Booking(), call("booking", restaurant="Roma"))
    body = any_inbox.client.get(f"/api/questions/{question_id}", headers=AUTH).json()
    assert body["kind"] == "form" and body["escalated_to"] == ["boss"] and body["reminded_at"] is not None
    assert body["policy"]["by"] == "finance" and body["policy"]["on_timeout"] == "expire"

    page = any_inbox.client.get("/", headers=AUTH).text
    assert '<p class="follow-ups">Reminded at <time' in page and "; escalated to boss at <time" in page
    conversation = any_inbox.client.get(f"/chats/{chat_id}", headers=AUTH).text
    assert '<li class="decision decision-remind">Reminded by its policy' in conversation

    events = any_inbox.client.get("/api/history", params={"question_id": question_id}, headers=AUTH).json()
    assert [(event["decision"], event["outcome"], event["channel"]) for event in events] == [
        ("remind", "reminded", "policy"),
        ("escalate", "escalated", "policy"),
    ]
