"""Questions tools ask: pausing, answering, declining, expiry, and what reaches resume()."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tarry import Chat, Field, Message, Question, Task, Tool
from tarry.errors import (
    InvalidAnswerError,
    PendingToolCallsError,
    QuestionExpiredError,
    UnknownQuestionError,
)
from tarry.testing import ScriptedModel, advance_clock


class BookTable(Tool):
    """Books a table; asks for the time and the size of the party."""

    def __init__(self, ttl: float | None = None) -> None:
        self.ttl = ttl
        self.resumed: list[dict[str, Any] | None] = []

    def execute(self, restaurant: str) -> Task:
        return self.ask(
            f"When should I book {restaurant}?",
            ttl=self.ttl,
            time=Field(choices=["19:00", "20:00"], title="Time"),
            party=Field("integer", minimum=1, maximum=12, default=2),
            note=Field(required=False),
        )

    def resume(self, task: Task, restaurant: str) -> str:
        self.resumed.append(task.answer)
        assert task.answer is not None
        return f"Booked {restaurant} at {task.answer['time']} for {task.answer['party']}"


class Login(Tool):
    """Needs the person to sign in on a web page."""

    def execute(self) -> Task:
        return self.ask("Sign in to continue", url="https://example.com/login")

    def resume(self, task: Task) -> str:
        return f"signed in with {task.answer!r}"


def book(restaurant: str = "Luigi's") -> list[dict[str, Any]]:
    return [{"name": "book_table", "arguments": {"restaurant": restaurant}}]


def results(chat: Chat) -> list[Any]:
    return [message.result() for message in chat.messages if message.role == "tool"]


async def parked(tool: BookTable | None = None) -> tuple[Chat, ScriptedModel, BookTable, Question]:
    tool = tool or BookTable()
    model = ScriptedModel([book(), "Done."])
    chat = Chat(model=model, tools=[tool])
    await chat.ask("Book dinner")
    [question] = await chat.pending_questions()
    return chat, model, tool, question


async def test_a_tool_question_pauses_the_call() -> None:
    chat, model, tool, question = await parked()
    assert question.kind == "form"
    assert question.message == "When should I book Luigi's?"
    assert [field.name for field in question.fields] == ["time", "party", "note"]
    assert question.fields[0].title == "Time"
    assert question.expires_at is None
    assert question.tool_call == chat.messages[1].tool_calls[0]
    assert question.id
    assert chat.waiting
    # A task that waits on a question is not also listed as a task.
    assert await chat.pending_tasks() == []
    assert tool.resumed == []
    assert len(model.requests) == 1
    # complete() changes nothing while the question is open.
    await chat.complete()
    assert tool.resumed == []
    assert len(model.requests) == 1


async def test_answering_resumes_with_the_accepted_values() -> None:
    chat, _, tool, question = await parked()
    assert await chat.answer(question, time="20:00", party="4", unasked="dropped") is True
    reply = await chat.complete()
    assert reply == Message("assistant", "Done.")
    assert tool.resumed == [{"time": "20:00", "party": 4}]
    assert results(chat) == ["Booked Luigi's at 20:00 for 4"]
    question = await chat.question(question)
    assert question.decision == "accept"
    assert question.answer == {"time": "20:00", "party": 4}
    assert await chat.pending_questions() == []


async def test_defaults_fill_omitted_fields_and_answers_can_go_by_id() -> None:
    chat, _, tool, question = await parked()
    assert await chat.answer(question.id, {"time": "19:00"}) is True
    await chat.complete()
    assert tool.resumed == [{"time": "19:00", "party": 2}]


async def test_a_single_field_question_takes_a_positional_value() -> None:
    class Pick(Tool):
        """Asks for one number."""

        def execute(self) -> Task:
            return self.ask("How many?", count=int)

        def resume(self, task: Task) -> Any:
            return task.answer

    chat = Chat(model=ScriptedModel([[{"name": "pick", "arguments": {}}], "ok"]), tools=[Pick()])
    await chat.ask("go")
    [question] = await chat.pending_questions()
    assert question.fields[0].type == "integer"
    assert question.fields[0].required is True
    assert await chat.answer(question, "3") is True
    await chat.complete()
    assert results(chat) == [{"count": 3}]


async def test_an_invalid_answer_names_each_field_and_records_nothing() -> None:
    chat, _, _, question = await parked()
    with pytest.raises(InvalidAnswerError) as raised:
        await chat.answer(question, time="18:00", party=40)
    assert set(raised.value.errors) == {"time", "party"}
    assert "time" in str(raised.value)
    assert "party" in str(raised.value)
    assert "18:00" in raised.value.errors["time"]
    with pytest.raises(InvalidAnswerError) as missing:
        await chat.answer(question, party=3)
    assert set(missing.value.errors) == {"time"}
    assert "required" in missing.value.errors["time"]
    with pytest.raises(InvalidAnswerError, match="name the fields"):
        await chat.answer(question, "19:00")
    assert question.decision is None
    assert await chat.pending_questions() == [question]
    # A valid answer is still accepted afterwards.
    assert await chat.answer(question, time="19:00") is True


async def test_answer_decline_return_true_then_false() -> None:
    chat, _, tool, question = await parked()
    assert await chat.answer(question, time="19:00") is True
    assert await chat.answer(question, time="20:00") is False
    assert await chat.decline(question, "changed my mind") is False
    question = await chat.question(question)
    assert question.answer == {"time": "19:00", "party": 2}
    await chat.complete()
    assert tool.resumed == [{"time": "19:00", "party": 2}]


async def test_declining_a_tools_question_ends_the_call_without_resume() -> None:
    chat, model, tool, question = await parked()
    assert await chat.decline(question, "we'll cook") is True
    await chat.complete()
    assert tool.resumed == []
    assert results(chat) == [{"error": "The user declined the book_table call.", "note": "we'll cook"}]
    assert model.requests[1].messages[-1].result()["note"] == "we'll cook"


async def test_unknown_question() -> None:
    chat, _, _, question = await parked()
    stranger = Question(id="made-up", kind="form", message="?")
    with pytest.raises(UnknownQuestionError, match="made-up"):
        await chat.answer(stranger, "x")
    with pytest.raises(UnknownQuestionError):
        await chat.decline("made-up")
    with pytest.raises(UnknownQuestionError):
        await chat.answer(12345)  # type: ignore[arg-type]
    assert question.decision is None


async def test_a_url_question() -> None:
    model = ScriptedModel([[{"name": "login", "arguments": {}}], "in"])
    chat = Chat(model=model, tools=[Login()])
    await chat.ask("log me in")
    [question] = await chat.pending_questions()
    assert question.kind == "url"
    assert question.url == "https://example.com/login"
    assert question.fields == ()
    assert await chat.answer(question) is True
    await chat.complete()
    assert results(chat) == ["signed in with {}"]


async def test_resume_may_ask_again_with_a_new_question() -> None:
    class TwoSteps(Tool):
        """Asks twice."""

        def execute(self) -> Task:
            return self.ask("First name?", first=str)

        def resume(self, task: Task) -> Any:
            assert task.answer is not None
            if "last" not in task.answer:
                first = task.answer["first"]
                follow_up = self.ask(f"Last name of {first}?", last=str)
                follow_up.data["first"] = first
                return follow_up
            return f"{task.data['first']} {task.answer['last']}"

    chat = Chat(model=ScriptedModel([[{"name": "two_steps", "arguments": {}}], "ok"]), tools=[TwoSteps()])
    await chat.ask("name")
    [first] = await chat.pending_questions()
    await chat.answer(first, "Ada")
    await chat.complete()
    [second] = await chat.pending_questions()
    assert second.id != first.id
    assert second.message == "Last name of Ada?"
    # The old question is settled: answering it again changes nothing.
    assert await chat.answer(first, "Grace") is False
    await chat.answer(second, "Lovelace")
    await chat.complete()
    assert results(chat) == ["Ada Lovelace"]


async def test_a_question_ttl_lapses() -> None:
    tool = BookTable(ttl=60)
    chat, _, _, question = await parked(tool)
    assert question.expires_at is not None
    advance_clock(61)
    assert await chat.pending_questions() == []
    with pytest.raises(QuestionExpiredError):
        await chat.answer(question, time="19:00")
    with pytest.raises(QuestionExpiredError):
        await chat.decline(question)
    reply = await chat.complete()
    assert reply == Message("assistant", "Done.")
    [result] = results(chat)
    assert "lapsed" in result["error"]
    assert "book_table" in result["error"]
    assert tool.resumed == []


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"ttl": 0}, "ttl"),
        ({"ttl": -5}, "ttl"),
        ({"ttl": "soon"}, "ttl"),
        ({"url": "ftp://x"}, "url"),
        ({"url": "https://x", "name": str}, "no fields"),
        ({"name": list}, "name"),
    ],
)
def test_bad_questions_are_refused_when_asked(kwargs: dict[str, Any], problem: str) -> None:
    class Asker(Tool):
        """Asks."""

        def execute(self) -> str:
            return ""

    with pytest.raises((ValueError, TypeError), match=problem):
        Asker().ask("Well?", **kwargs)


def test_a_question_needs_a_message() -> None:
    class Asker(Tool):
        """Asks."""

        def execute(self) -> str:
            return ""

    with pytest.raises(ValueError, match="message"):
        Asker().ask("  ")


async def test_ask_while_calls_wait_raises_before_recording_anything() -> None:
    chat, model, _, question = await parked()
    before = list(chat.messages)
    with pytest.raises(PendingToolCallsError, match="book_table"):
        await chat.ask("Never mind, something else")
    assert chat.messages == before
    assert len(model.requests) == 1
    assert await chat.pending_questions() == [question]


async def test_cancel_closes_waiting_calls_and_the_chat_goes_on() -> None:
    chat, model, tool, question = await parked()
    model.turns.append("Cancelled, what next?")
    await chat.cancel()
    assert chat.waiting is False
    assert await chat.pending_questions() == []
    assert results(chat) == [{"error": "The book_table call was cancelled."}]
    # The cancelled question cannot be answered any more.
    assert await chat.answer(question, time="19:00") is False
    assert tool.resumed == []
    # Every call has exactly one result, so the chat can take a new message.
    ids = [call.id for message in chat.messages for call in message.tool_calls]
    assert [m.tool_call_id for m in chat.messages if m.role == "tool"] == ids
    reply = await chat.ask("ok")
    assert reply is not None
    assert reply.content in {"Done.", "Cancelled, what next?"}


async def test_question_ids_are_fresh_uuids_and_know_their_chat() -> None:
    ids = []
    for _ in range(3):
        chat, _, _, question = await parked()
        assert question.chat_id == chat.id
        assert question.asked_at is not None
        assert uuid.UUID(question.id).version == 4
        ids.append(question.id)
    assert len(set(ids)) == 3
