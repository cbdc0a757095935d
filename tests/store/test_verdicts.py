"""A stored question is a frozen value: its decision, read back from its row, is a ``Verdict``; a tool that asks
while it runs gets the recorded question back, and the question it passed stays as it was."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import pytest

from tarry import Principal, Question, Tool, Verdict
from tarry.clock import utcnow
from tarry.live import current_call
from tarry.store import Store
from tests.store.test_store import park
from tests.store.tools import reactive_model


async def test_a_decided_question_read_from_the_store_holds_a_verdict_with_who_when_and_through_what(
    store: Store,
) -> None:
    chat_id = await park(store)
    approval, colour = await store.pending_questions(chat_id)
    before = utcnow()
    decided = await store.decide(colour.id, "decline", note="none of those", by=Principal("bob", "Bob"), channel="cli")

    read = await store.question(colour.id)
    assert decided is not None and decided.verdict == read.verdict
    verdict = read.verdict
    assert isinstance(verdict, Verdict)
    assert (verdict.decision, verdict.answer, verdict.note) == ("decline", None, "none of those")
    assert (verdict.by, verdict.channel) == (Principal("bob", "Bob"), "cli")
    assert verdict.at.tzinfo is not None and verdict.at == read.decided_at
    assert before - timedelta(minutes=1) < verdict.at < utcnow() + timedelta(minutes=1)  # the database's clock
    assert colour.verdict is None and colour.decision is None  # the question read before stays as it was
    assert (await store.question(approval.id)).verdict is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        read.verdict = None  # type: ignore[misc]


async def test_a_tool_asking_while_it_runs_gets_the_recorded_question_and_its_own_stays_undecided(
    database_url: str,
) -> None:
    passed: list[Question] = []
    returned: list[Question] = []

    class Lookup(Tool):
        """Looks an account up, asking for its number while it runs."""

        async def execute(self, name: str) -> str:
            live = current_call.get()
            assert live is not None
            question = Question("", "form", "Account number?")
            passed.append(question)
            returned.append(await live.ask(question))
            return f"{name}: {returned[0].decision} {returned[0].answer}"

    calls = [{"name": "lookup", "arguments": {"name": "Ada"}}]
    async with Store(database_url, poll_interval=0.01) as store:
        await store.setup()
        chat = await store.create_chat(reactive_model(calls), [Lookup()])
        running = asyncio.create_task(chat.ask("Find Ada"))
        async with asyncio.timeout(10):
            while not (waiting := await store.pending_questions(chat.id)):
                await asyncio.sleep(0.01)
        (asked,) = waiting
        assert await store.answer(asked.id, {}, by="ann", channel="web") is True
        assert (await running).content == "All done."

    (got,) = returned
    assert got.id == asked.id and got.awaited and got.tool_call is not None and got.tool_call.name == "lookup"
    assert (got.decision, got.answer, got.decided_by, got.channel) == ("accept", {}, Principal("ann"), "web")
    assert got.verdict is not None and got.verdict.at == got.decided_at
    assert (passed[0].id, passed[0].verdict, passed[0].awaited, passed[0].asked_at) == ("", None, False, None)
