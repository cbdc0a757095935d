"""Approving with changed arguments in an in-memory chat: what a tool lets change, the call as it ran, the policy of
the changed call, and votes bound to the arguments they approved."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tarry import Approval, Chat, Message, Question, Tool, ToolCall, tool
from tarry.approvals import Vote, judge, standing
from tarry.edits import arguments_digest, check_edit, editable_schema
from tarry.errors import InvalidAnswerError, NotAllowedError
from tarry.principals import Principal
from tarry.testing import ScriptedModel


class Transfer(Tool):
    """Moves money; over 100 needs two people."""

    editable = ("amount",)

    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    def requires_approval(self, call: ToolCall) -> Approval:  # type: ignore[override]
        return Approval(count=2) if call.arguments.get("amount", 0) > 100 else Approval()

    def execute(self, amount: int, to: str) -> str:
        self.sent.append((amount, to))
        return f"sent {amount} to {to}"


def transfer(amount: int = 50, to: str = "bob") -> list[dict[str, Any]]:
    return [{"name": "transfer", "arguments": {"amount": amount, "to": to}}]


async def parked(amount: int = 50) -> tuple[Chat, Transfer, Question, list[list[Message]]]:
    seen: list[list[Message]] = []

    def reply(messages: list[Message]) -> str:
        seen.append(list(messages))
        return "finished"

    money = Transfer()
    chat = Chat(model=ScriptedModel([transfer(amount), reply]), tools=[money])
    await chat.ask("Pay Bob")
    [question] = await chat.pending_questions()
    return chat, money, question, seen


async def test_the_call_runs_once_with_the_changed_arguments_and_the_model_is_told() -> None:
    chat, money, question, seen = await parked()
    assert question.editable is not None and list(question.editable["properties"]) == ["amount"]
    assert await chat.approve(question, arguments={"amount": 20})
    await chat.complete()
    assert money.sent == [(20, "bob")]
    [shown] = seen
    assert shown[1].tool_calls[0].arguments == {"amount": 20, "to": "bob"}
    assert shown[2].content.startswith(
        'A person changed the arguments of this transfer call before approving it: from {"amount": 50, "to": "bob"} '
        'to {"amount": 20, "to": "bob"}.'
    )
    assert shown[2].content.endswith("sent 20 to bob")


async def test_a_change_the_tool_does_not_allow_or_that_does_not_fit_is_refused_per_parameter() -> None:
    chat, money, question, _ = await parked()
    with pytest.raises(InvalidAnswerError) as caught:
        await chat.approve(question, arguments={"to": "eve", "amount": -1.5})
    assert caught.value.errors["to"] == "the transfer tool does not let a person change to"
    assert caught.value.errors["amount"] == "-1.5 is not of type 'integer'"
    assert question.decision is None and money.sent == []


async def test_a_changed_call_whose_policy_asks_more_is_asked_again_then_runs_as_changed() -> None:
    chat, money, question, seen = await parked()
    assert await chat.approve(question, arguments={"amount": 500})
    await chat.complete()
    assert money.sent == [] and chat.waiting
    [again] = await chat.pending_questions()
    assert again.id != question.id and again.tool_call == question.tool_call
    assert again.policy == Approval(count=2) and again.proposal == {"amount": 500, "to": "bob"}
    assert again.changed_arguments == {"amount": 500, "to": "bob"} and again.editable == question.editable
    assert await chat.approve(again, by=Principal("ann"))
    assert await chat.approve(again, by=Principal("bob"))
    assert (await chat.question(again)).answer == {"arguments": {"amount": 500, "to": "bob"}}
    await chat.complete()
    assert money.sent == [(500, "bob")]
    assert seen[0][2].content.endswith("sent 500 to bob")


def test_editable_names_only_parameters_and_false_allows_nothing() -> None:
    with pytest.raises(ValueError, match="editable names 'colour', which it has no parameter"):

        @tool(requires_approval=True, editable=["colour"])
        def paint(wall: str) -> str:
            """Paints a wall."""
            return wall

    @tool(requires_approval=True, editable=False)
    def shred(document: str) -> str:
        """Shreds a document."""
        return document

    assert shred.editable_schema() is None
    assert editable_schema("x", {"properties": {}}, True) is None


def test_the_digest_is_of_canonical_json() -> None:
    assert arguments_digest({"a": 1, "b": [1, "é"]}) == arguments_digest({"b": [1, "é"], "a": 1})
    assert arguments_digest({"a": 1}) != arguments_digest({"a": 2})


def test_votes_count_only_for_the_arguments_they_approved() -> None:
    call = ToolCall("c1", "transfer", {"amount": 500, "to": "bob"})
    question = Question("q", "approval", "Pay?", tool_call=call, policy=Approval(count=2), editable=None)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    ann, bob = Principal("ann"), Principal("bob")
    question = question.with_vote(Vote.from_dict({"id": "ann", "name": None, "at": at.isoformat()}))  # no digest
    assert judge(question, "accept", bob, None) == "decide"
    edited = {"arguments": {"amount": 90, "to": "bob"}}
    assert judge(question, "accept", bob, None, edited) == "count"
    question = question.with_vote(Vote(bob, at, arguments_digest(edited["arguments"]), edited["arguments"]))
    assert question.proposal == edited["arguments"]
    assert (
        standing(question)
        == "Needs 2 different people's approval; 1 of 2 so far: bob (1 for other arguments, not counted)."
    )
    assert judge(question, "accept", ann, None) == "decide", "ann may approve again: other arguments"
    with pytest.raises(NotAllowedError, match="bob already approved"):
        judge(question, "accept", bob, None)
    assert Vote.from_dict(question.votes[1].to_dict()) == question.votes[1]
    with pytest.raises(InvalidAnswerError, match="does not let a person change its arguments"):
        check_edit(question, {"amount": 1})
