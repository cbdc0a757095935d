"""Approvals: which calls need one, approving, declining with a note, expiry, and first decision wins."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from tarry import Chat, Question, Tool, ToolCall, tool
from tarry.clock import utcnow
from tarry.errors import InvalidAnswerError, QuestionExpiredError, UnknownQuestionError
from tarry.testing import ScriptedModel, advance_clock


class TransferMoney(Tool):
    """Moves money between two accounts."""

    requires_approval = True

    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    def execute(self, amount: int, to: str) -> str:
        self.sent.append((amount, to))
        return f"sent {amount} to {to}"


def transfer(amount: Any = 5, to: str = "bob") -> list[dict[str, Any]]:
    return [{"name": "transfer_money", "arguments": {"amount": amount, "to": to}}]


def results(chat: Chat) -> list[Any]:
    return [message.result() for message in chat.messages if message.role == "tool"]


def move_clock_past(moment: datetime | None) -> None:
    """Move tarry's clock just past ``moment``."""
    assert moment is not None
    advance_clock(max((moment - utcnow()).total_seconds(), 0.0) + 0.001)


async def parked_transfer(tool: Tool | None = None, *, amount: Any = 5) -> tuple[Chat, ScriptedModel, Question]:
    model = ScriptedModel([transfer(amount), "finished"])
    chat = Chat(model=model, tools=[tool or TransferMoney()])
    await chat.ask("Pay Bob")
    [question] = await chat.pending_questions()
    return chat, model, question


async def test_an_approval_question_describes_the_call() -> None:
    chat, model, question = await parked_transfer()
    assert question.kind == "approval"
    assert question.fields == ()
    assert question.expires_at is None
    assert isinstance(question.tool_call, ToolCall)
    assert question.tool_call.name == "transfer_money"
    assert dict(question.tool_call.arguments) == {"amount": 5, "to": "bob"}
    assert question.tool_call.id == chat.messages[1].tool_calls[0].id
    assert "transfer_money" in question.message
    assert chat.waiting
    assert await chat.pending_tasks() == []
    assert len(model.requests) == 1


async def test_the_approval_shows_the_arguments_exactly_as_the_model_sent_them() -> None:
    tool = TransferMoney()
    chat, _, question = await parked_transfer(tool, amount="5")
    assert question.tool_call is not None
    assert dict(question.tool_call.arguments) == {"amount": "5", "to": "bob"}
    await chat.approve(question)
    await chat.complete()
    assert tool.sent == [(5, "bob")]


async def test_approving_runs_the_call() -> None:
    tool = TransferMoney()
    chat, _, question = await parked_transfer(tool)
    assert tool.sent == []
    assert await chat.approve(question) is True
    reply = await chat.complete()
    assert reply is not None
    assert reply.content == "finished"
    assert tool.sent == [(5, "bob")]
    assert results(chat) == ["sent 5 to bob"]
    assert chat.waiting is False
    assert await chat.pending_questions() == []


async def test_answering_an_approval_approves_it_and_it_takes_no_value() -> None:
    tool = TransferMoney()
    chat, _, question = await parked_transfer(tool)
    with pytest.raises(InvalidAnswerError, match="approval"):
        await chat.answer(question, "yes")
    assert question.decision is None
    assert await chat.answer(question.id) is True
    await chat.complete()
    assert tool.sent == [(5, "bob")]


async def test_declining_with_a_note_reaches_the_model() -> None:
    tool = TransferMoney()
    chat, model, question = await parked_transfer(tool)
    assert await chat.decline(question, "not today") is True
    reply = await chat.complete()
    assert reply is not None
    assert reply.content == "finished"
    assert tool.sent == []
    assert results(chat) == [{"error": "The user declined the transfer_money call.", "note": "not today"}]
    assert model.requests[1].messages[-1].result()["note"] == "not today"


async def test_declining_without_a_note() -> None:
    chat, _, question = await parked_transfer()
    assert await chat.decline(question.id) is True
    await chat.complete()
    assert results(chat) == [{"error": "The user declined the transfer_money call."}]


async def test_decline_note_must_be_text() -> None:
    chat, _, question = await parked_transfer()
    with pytest.raises(TypeError, match="note"):
        await chat.decline(question, 42)  # type: ignore[arg-type]
    assert question.decision is None


@pytest.mark.parametrize(
    ("first", "second"),
    [("approve", "approve"), ("approve", "decline"), ("decline", "approve"), ("decline", "answer")],
)
async def test_the_first_decision_wins(first: str, second: str) -> None:
    tool = TransferMoney()
    chat, _, question = await parked_transfer(tool)
    assert await getattr(chat, first)(question) is True
    assert await getattr(chat, second)(question) is False
    await chat.complete()
    assert (tool.sent == [(5, "bob")]) is (first == "approve")


async def test_unknown_questions_are_refused() -> None:
    chat, _, question = await parked_transfer()
    _, _, foreign = await parked_transfer()
    for verb in (chat.approve, chat.decline, chat.answer):
        with pytest.raises(UnknownQuestionError, match="never asked"):
            await verb("no-such-id")
        with pytest.raises(UnknownQuestionError):
            await verb(foreign)
    assert issubclass(UnknownQuestionError, ValueError)
    assert question.decision is None
    assert foreign.decision is None


async def test_requires_approval_as_a_method_decided_once_when_the_call_is_recorded() -> None:
    class Spend(Tool):
        """Spends money; big amounts need a person."""

        def __init__(self) -> None:
            self.asked: list[ToolCall] = []
            self.threshold = 100

        def requires_approval(self, call: ToolCall) -> bool:  # type: ignore[override]
            self.asked.append(call)
            return bool(call.arguments["amount"] > self.threshold)

        def execute(self, amount: int) -> str:
            return f"spent {amount}"

    spend = Spend()
    turn = [{"name": "spend", "arguments": {"amount": 500}}, {"name": "spend", "arguments": {"amount": 5}}]
    chat = Chat(model=ScriptedModel([turn, "done"]), tools=[spend])
    await chat.ask("shop")
    big, small = chat.messages[1].tool_calls
    assert [call.id for call in spend.asked] == [big.id, small.id]
    assert results(chat) == ["spent 5"]
    [question] = await chat.pending_questions()
    assert question.tool_call == big
    # Changing the rule now does not change the recorded decision, and it is not asked again.
    spend.threshold = 10_000
    await chat.complete()
    await chat.pending_questions()
    assert chat.waiting
    assert len(spend.asked) == 2
    await chat.approve(question)
    await chat.complete()
    assert len(spend.asked) == 2
    assert sorted(results(chat)) == ["spent 5", "spent 500"]


async def test_decorated_tools_take_an_approval_rule() -> None:
    @tool(requires_approval=lambda call: call.arguments["path"].startswith("/etc"))
    def delete_file(path: str) -> str:
        """Deletes a file."""
        return f"deleted {path}"

    turn = [{"name": "delete_file", "arguments": {"path": "/etc/passwd"}}]
    turn.append({"name": "delete_file", "arguments": {"path": "/tmp/x"}})
    chat = Chat(model=ScriptedModel([turn, "ok"]), tools=[delete_file])
    await chat.ask("clean up")
    assert results(chat) == ["deleted /tmp/x"]
    [question] = await chat.pending_questions()
    assert question.tool_call is not None
    assert question.tool_call.arguments["path"] == "/etc/passwd"


async def test_a_rule_that_raises_asks_a_person() -> None:
    class Fragile(Tool):
        """Its rule breaks."""

        def requires_approval(self, call: ToolCall) -> bool:  # type: ignore[override]
            raise RuntimeError("rule broke")

        def execute(self) -> str:
            return "ran"

    chat = Chat(model=ScriptedModel([[{"name": "fragile", "arguments": {}}], "ok"]), tools=[Fragile()])
    await chat.ask("go")
    [question] = await chat.pending_questions()
    assert question.kind == "approval"


async def test_invalid_arguments_need_no_approval_and_end_the_call() -> None:
    tool = TransferMoney()
    chat = Chat(model=ScriptedModel([transfer(amount="lots"), "sorry"]), tools=[tool])
    reply = await chat.ask("Pay Bob")
    assert reply is not None
    assert reply.content == "sorry"
    assert await chat.pending_questions() == []
    [result] = results(chat)
    assert "amount" in result["error"]
    assert tool.sent == []


async def test_an_approval_ttl_lapses() -> None:
    class QuickTransfer(TransferMoney):
        """Moves money; decide quickly."""

        name = "transfer_money"
        approval_ttl = 60

    tool = QuickTransfer()
    chat, _, question = await parked_transfer(tool)
    assert question.asked_at is not None
    assert question.expires_at is not None
    assert question.expires_at.tzinfo is not None
    assert abs((question.expires_at - question.asked_at).total_seconds() - 60) < 1e-6
    move_clock_past(question.expires_at)
    # Expired approvals are not listed and cannot be decided.
    assert await chat.pending_questions() == []
    with pytest.raises(QuestionExpiredError, match=question.id):
        await chat.approve(question)
    with pytest.raises(QuestionExpiredError):
        await chat.decline(question, "too late")
    with pytest.raises(QuestionExpiredError):
        await chat.answer(question.id)
    assert question.decision is None
    # The next complete() closes the call with a lapsed result for the model.
    reply = await chat.complete()
    assert reply is not None
    assert reply.content == "finished"
    [result] = results(chat)
    assert "lapsed" in result["error"]
    assert "transfer_money" in result["error"]
    assert tool.sent == []
    assert chat.waiting is False


async def test_an_approval_decided_in_time_does_not_lapse() -> None:
    class SlowTransfer(TransferMoney):
        """Moves money."""

        name = "transfer_money"
        approval_ttl = 3600

    tool = SlowTransfer()
    chat, _, question = await parked_transfer(tool)
    assert question.expires_at is not None
    assert await chat.approve(question)
    await chat.complete()
    assert tool.sent == [(5, "bob")]


async def test_cancel_keeps_a_decision_already_made() -> None:
    chat, _, question = await parked_transfer()
    await chat.decline(question, "no thanks")
    await chat.cancel()
    assert results(chat) == [{"error": "The user declined the transfer_money call.", "note": "no thanks"}]
    assert chat.waiting is False
