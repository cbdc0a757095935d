"""A chat takes in what its journal read (a ``Changes`` value), and decides through a journal that speaks ids.

No database: a journal of the tests' own yields the changes another process would have
recorded, as a store's journal does after reading its rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest

from tarry import Chat, Message, Task, Tool, ToolCall
from tarry.changes import CallChange, Changes
from tarry.clock import utcnow
from tarry.errors import CorruptStateError, ToolCallRunningError
from tarry.journal import MemoryJournal
from tarry.live import current_call
from tarry.questions import Question, Verdict
from tarry.testing import ScriptedModel


class Shipment(Task):
    """The task class the reship tool rebuilds its pauses as."""


class Reship(Tool):
    """Sends an order again by the carrier a person picks."""

    task_class = Shipment

    def execute(self, order: str) -> Task:
        return self.ask("Which carrier?", carrier=str)

    def resume(self, task: Task, order: str) -> str:
        return f"{order} goes out by {task.answer['carrier'] if task.answer else '?'}"


class ReadingJournal(MemoryJournal):
    """An in-memory journal whose next refresh yields the changes it was handed, and notes what the chat held."""

    def __init__(self) -> None:
        super().__init__()
        self.next: Changes | None = None
        self.starts: list[int] = []
        self.held: list[Changes] = []

    @asynccontextmanager
    async def refresh(
        self, start: int, *, at_claim: bool = False, listing: bool = False
    ) -> AsyncIterator[Changes | None]:
        changes, self.next = self.next, None
        self.starts.append(start)
        yield changes
        if changes is not None:
            self.held.append(changes)


CALL = ToolCall("c1", "reship", {"order": "A17"})
USER = Message("user", "Send A17 again")
ASSISTANT = Message("assistant", "", tool_calls=(CALL,))


def carrier_question(**decided: Any) -> Question:
    return Question("q1", "form", "Which carrier?", tool_call=CALL, chat_id="chat-1", **decided)


def paused(question: Question, *, state_changed: bool = True, result: Message | None = None) -> CallChange:
    state = Task(status="input_required").with_question(question).to_dict()
    return CallChange(
        CALL, False, (question,), state_changed, state if state_changed else None, frozenset({"q1"}), result
    )


async def test_a_chat_adopts_a_call_another_process_paused_and_rebuilds_its_task_with_its_tool() -> None:
    journal = ReadingJournal()
    chat = Chat(tools=[Reship()], id="chat-1", journal=journal)
    asked = carrier_question()
    journal.next = Changes(0, (USER, ASSISTANT), (), (paused(asked),))

    assert await chat.pending_questions() == [asked]

    record = chat.records["c1"]
    assert chat.messages == [USER, ASSISTANT]
    assert isinstance(record.task, Shipment)
    assert record.task.questions == [asked] and record.task.tool_call is CALL
    assert record.open and not record.needs_approval
    assert journal.starts == [0] and len(journal.held) == 1


async def test_a_chat_keeps_the_records_it_holds_and_takes_the_recorded_questions_and_result() -> None:
    journal = ReadingJournal()
    chat = Chat(tools=[Reship()], id="chat-1", journal=journal)
    asked = carrier_question()
    journal.next = Changes(0, (USER, ASSISTANT), (), (paused(asked),))
    await chat.pending_questions()
    record, task = chat.records["c1"], chat.records["c1"].task

    decided = carrier_question(verdict=Verdict("accept", utcnow(), answer={"carrier": "post"}))
    result = Message("tool", "A17 goes out by post", tool_call_id="c1")
    login = Question("q0", "url", "Log in", url="https://example.com/login", chat_id="chat-1")
    journal.next = Changes(1, (ASSISTANT, result), (login,), (paused(decided, state_changed=False, result=result),))

    assert await chat.pending_questions() == [login]

    assert journal.starts == [0, 1]
    assert chat.records["c1"] is record and record.task is task  # the state did not change: no rebuild
    assert record.questions == [decided] and decided.decision == "accept" and decided.answer == {"carrier": "post"}
    assert asked.decision is None  # a value: the question read before stays as it was read
    assert record.result is result and not record.open
    assert chat.messages == [USER, ASSISTANT, result]
    assert chat.chat_questions == [login] and chat.waiting


async def test_a_state_that_cannot_be_loaded_leaves_the_chat_and_the_journal_as_they_were() -> None:
    journal = ReadingJournal()
    chat = Chat(id="chat-1", journal=journal)  # no reship tool: Task.load rebuilds the state
    broken = CallChange(CALL, False, (), True, {"task": {}}, frozenset())
    journal.next = Changes(0, (USER, ASSISTANT), (), (broken,))

    with pytest.raises(CorruptStateError, match="reship call c1 \\(chat chat-1\\) cannot be loaded") as raised:
        await chat.pending_questions()

    assert (raised.value.chat_id, raised.value.call_id) == ("chat-1", "c1")
    assert chat.messages == [] and chat.records == {} and journal.held == []


async def test_a_question_asked_while_the_call_runs_is_answered_from_outside_and_may_be_declined() -> None:
    asked: list[Question] = []

    class Lookup(Tool):
        """Looks a customer up, asking for the account number while it runs."""

        async def execute(self, name: str) -> str:
            live = current_call.get()
            assert live is not None
            question = Question("", "form", "Account number?")
            asked.append(question)
            for_account = await live.ask(question)
            return f"{name}: {for_account.decision} {for_account.answer or for_account.note}"

    model = ScriptedModel([[{"name": "lookup", "arguments": {"name": "Ada"}}], "Done."])
    chat = Chat(model, [Lookup()])
    running = asyncio.create_task(chat.ask("Find Ada"))
    async with asyncio.timeout(5):
        while not (pending := await chat.pending_questions()):
            await asyncio.sleep(0)  # lets the tool run up to its question
    [question] = pending
    assert question is not asked[0] and question.awaited and question.extra == {}
    assert question.tool_call is not None and chat.records[question.tool_call.id].running
    assert await chat.decline(question, "not now")
    assert not await chat.decline(question, "again")
    assert (await running).content == "Done."
    assert chat.messages[-2].content == "Ada: decline not now"
    # The tool got the recorded question back; the one it passed is a value, left as it was.
    assert (asked[0].id, asked[0].decision, asked[0].awaited) == ("", None, False)


async def test_declining_an_approval_of_a_call_that_runs_is_refused_by_the_memory_journal() -> None:
    journal = MemoryJournal()
    approval = Question("a1", "approval", "Approve?", tool_call=CALL)
    with pytest.raises(ToolCallRunningError, match="the reship call is running right now"):
        await journal.decide(approval, "decline", None, None, None, "code", running=True, closed=False)
    assert await journal.decide(approval, "accept", {}, None, None, "code", running=False, closed=True) is None
    decided = await journal.decide(approval, "accept", {}, None, None, "web", running=False, closed=False)
    assert decided is not None and decided is not approval
    assert (decided.decision, decided.channel, approval.decision) == ("accept", "web", None)


async def test_waiting_on_a_question_in_memory_ends_when_its_time_runs_out() -> None:
    journal = MemoryJournal()
    question = Question("q9", "form", "Still there?", expires_at=utcnow() + timedelta(milliseconds=50))
    async with asyncio.timeout(5):
        assert await journal.wait_for_decision(question) is question
    assert question.decision is None and question.expired(utcnow())
