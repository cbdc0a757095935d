"""Who decided and who may, on an in-memory chat: the same policy rule the store applies under its lock."""

from __future__ import annotations

import pytest

from tarry import Chat, tool
from tarry.approvals import Approval, judge
from tarry.errors import NotAllowedError
from tarry.principals import Principal, principal_of
from tarry.questions import Question
from tarry.testing import ScriptedModel

ran: list[str] = []


@tool(requires_approval=Approval(count=2))
def deploy(service: str) -> str:
    """Deploys a service to production."""
    ran.append(service)
    return f"{service} deployed"


def deploy_chat() -> Chat:
    return Chat(ScriptedModel([[{"name": "deploy", "arguments": {"service": "api"}}], "Deployed."]), [deploy])


async def test_a_two_person_approval_runs_after_the_second_distinct_person() -> None:
    ran.clear()
    chat = deploy_chat()
    await chat.ask("Ship the api")
    [question] = await chat.pending_questions()
    assert question.policy == Approval(count=2)
    assert await chat.approve(question, by="ann")
    with pytest.raises(NotAllowedError, match="Ann already approved the deploy call"):
        await chat.approve(question, by=Principal("ann", "Ann"))
    with pytest.raises(NotAllowedError, match="needs to know who decides"):
        await chat.approve(question)
    await chat.complete()
    assert chat.waiting and ran == []
    assert await chat.approve(question, by="bob", channel="web")
    question = await chat.question(question)  # a value: the chat holds the decided one
    assert (question.decision, question.decided_by, question.channel) == ("accept", Principal("bob"), "web")
    assert [vote.principal.id for vote in question.votes] == ["ann", "bob"]
    assert (await chat.complete()).content == "Deployed."
    assert ran == ["api"]


async def test_a_plain_approval_records_who_or_nobody() -> None:
    @tool(requires_approval=True)
    def wipe(disk: str) -> str:
        """Wipes a disk."""
        return "wiped"

    chat = Chat(ScriptedModel([[{"name": "wipe", "arguments": {"disk": "d1"}}], "Done."]), [wipe])
    await chat.ask("Wipe d1")
    [question] = await chat.pending_questions()
    assert question.policy is None
    assert await chat.decline(question, "no", by=Principal("u1", "Una"), channel="cli")
    question = await chat.question(question)
    assert (question.decided_by, question.channel, question.votes) == (Principal("u1", "Una"), "cli", ())


def test_policies_and_principals_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="Approval count must be a positive int, got 0"):
        Approval(count=0)
    with pytest.raises(ValueError, match="Approval by must be a non-empty str"):
        Approval(by="")
    with pytest.raises(ValueError, match="A principal's id must be a non-empty str"):
        Principal(" ")
    assert principal_of("ann") == Principal("ann") and principal_of(None) is None
    question = Question("q", "approval", "Approve?", policy=Approval(by="ops"))
    assert judge(question, "accept", Principal("ann"), lambda principal, asked: asked.policy is not None) == "decide"
    assert judge(question, "cancel", None, None) == "decide"  # the chat's own cancellation is never refused
    with pytest.raises(NotAllowedError, match="ann may not decide this question"):
        judge(question, "accept", Principal("ann"), lambda principal, asked: False)
