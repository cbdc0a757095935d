"""``chat.complete(approve=[...])``: approving and carrying on, with the freed call claimed by the approval's write."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tarry import Question, Tool
from tarry.errors import MissingToolsError
from tarry.store import Store
from tests.store.test_store import TRANSFER_TO_ANN, parked_on_transfers, statements_sent
from tests.store.tools import all_tools, reactive_model


def tool_results(messages: list[Any]) -> list[str]:
    return [str(message.content) for message in messages if message.role == "tool"]


async def test_approving_in_complete_claims_the_freed_call_with_the_decision(database_url: str) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        parked, _ = await parked_on_transfers(store, ["Ann"])
        chat = await store.load_chat(parked.id, reactive_model(TRANSFER_TO_ANN), all_tools())
        (question,) = await chat.pending_questions()
        with statements_sent(store) as sent:
            reply = await chat.complete(approve=[question], by="ann@example.com", channel="web")
        assert reply is not None and reply.content == "All done." and not chat.waiting
        assert question.decision == "accept" and question.decided_by is not None
        assert tool_results(await other.messages(chat.id)) == ["Sent 1 to Ann"]
        (event,) = await other.history(chat.id)
        assert (event.decision, event.outcome, event.channel) == ("accept", "decided", "web")
        assert event.by is not None and event.by.id == "ann@example.com"
    if not database_url.startswith("sqlite"):
        # The decision claims the call: then only the result and the reply, no claim of its own.
        assert sent[:1] == ["decision"] and "claim" not in sent, f"the call was claimed apart: {sent}"


async def test_approving_several_questions_in_complete_runs_each_freed_call_once(database_url: str) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        parked, _ = await parked_on_transfers(store, ["Ann", "Bob"], max_concurrency=1)
        chat = await store.load_chat(parked.id, reactive_model([]), all_tools(), max_concurrency=1)
        questions = await chat.pending_questions()
        with statements_sent(store) as sent:
            reply = await chat.complete(approve=[question.id for question in questions])
        assert reply is not None and reply.content == "All done."
        assert tool_results(await other.messages(chat.id)) == ["Sent 1 to Ann", "Sent 1 to Bob"]
    if not database_url.startswith("sqlite"):
        assert sent[:2] == ["decision", "decision"] and "claim" not in sent, f"a call was claimed apart: {sent}"


async def test_a_call_claimed_with_its_approval_is_busy_for_another_process_while_it_runs(database_url: str) -> None:
    entered, release, runs = asyncio.Event(), asyncio.Event(), []

    class Wire(Tool):
        """Wires money, once released."""

        requires_approval = True

        async def execute(self, to: str) -> str:
            runs.append(to)
            entered.set()
            await release.wait()
            return f"Wired to {to}"

    calls = [{"name": "wire", "arguments": {"to": "Ann"}}]
    async with Store(database_url) as store, Store(database_url) as other:
        await store.setup()
        chat = await store.start_chat("Wire Ann", reactive_model(calls), [Wire()])
        (question,) = await chat.pending_questions()
        running = asyncio.create_task(chat.complete(approve=[question]))
        async with asyncio.timeout(10):
            await entered.wait()
        elsewhere = await other.load_chat(chat.id, reactive_model(calls), [Wire()])
        await elsewhere.complete()  # finds the call held: runs nothing
        assert elsewhere.waiting and runs == ["Ann"]
        release.set()
        reply = await running
    assert reply is not None and reply.content == "All done." and runs == ["Ann"]


async def test_a_call_claimed_with_its_approval_is_given_back_when_the_chat_cannot_run_it(database_url: str) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        parked, _ = await parked_on_transfers(store, ["Ann"])
        toolless = await store.load_chat(parked.id, reactive_model([]), [])
        (question,) = await toolless.pending_questions()
        with pytest.raises(MissingToolsError, match="transfer_money"):
            await toolless.complete(approve=[question])
        assert (await other.question(question.id)).decision == "accept"
        elsewhere = await other.load_chat(parked.id, reactive_model([]), all_tools())
        reply = await elsewhere.complete()  # at once, not once a lease ran out
        assert reply is not None and reply.content == "All done."
        assert tool_results(elsewhere.messages) == ["Sent 1 to Ann"]


async def test_a_caller_cancelled_after_the_approval_claimed_the_call_gives_the_call_back(database_url: str) -> None:
    hooked, hold = asyncio.Event(), asyncio.Event()

    async def slow_hook(question: Question) -> None:
        hooked.set()
        await hold.wait()

    async with Store(database_url) as store, Store(database_url) as other:
        parked, _ = await parked_on_transfers(store, ["Ann"])
        chat = await store.load_chat(parked.id, reactive_model([]), all_tools())
        (question,) = await chat.pending_questions()
        store.decision_hooks.append(slow_hook)
        approving = asyncio.create_task(chat.complete(approve=[question]))
        async with asyncio.timeout(10):
            await hooked.wait()  # the decision (and its claim) is recorded; the hook runs
        approving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await approving
        elsewhere = await other.load_chat(parked.id, reactive_model([]), all_tools())
        reply = await elsewhere.complete()
        assert reply is not None and reply.content == "All done.", "the call stayed claimed by the cancelled caller"
        assert tool_results(elsewhere.messages) == ["Sent 1 to Ann"]


async def test_approving_in_complete_after_another_process_changed_the_chat_carries_on_from_the_change(
    database_url: str,
) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        parked, (to_ann, to_bob) = await parked_on_transfers(store, ["Ann", "Bob"])
        chat = await store.load_chat(parked.id, reactive_model([]), all_tools())
        assert await other.decline(to_bob.id, "Bob was paid") is True  # after the load
        with statements_sent(store) as sent:
            reply = await chat.complete(approve=[to_ann.id])
        assert reply is not None and reply.content == "All done."
        results = sorted(tool_results(await other.messages(chat.id)))
        assert results[0] == "Sent 1 to Ann" and "declined" in results[1], results
    if not database_url.startswith("sqlite"):
        # The decision's versions show another writer: it claimed nothing, and the chat reads before it claims.
        assert sent[:2] == ["decision", "load"] and sent.count("claim") == 2, sent


async def test_an_approval_in_complete_that_another_decision_beat_carries_on_from_that_decision(
    database_url: str,
) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        parked, (to_ann,) = await parked_on_transfers(store, ["Ann"])
        chat = await store.load_chat(parked.id, reactive_model([]), all_tools())
        assert await other.decline(to_ann.id, "Not today") is True
        reply = await chat.complete(approve=[to_ann])
        assert reply is not None and reply.content == "All done."
        (result,) = tool_results(chat.messages)
        assert "declined" in result and "Not today" in result
        outcomes = [event.outcome for event in await other.history(chat.id)]
        assert outcomes == ["decided", "lost"]


async def test_complete_refuses_one_question_for_approve_and_by_without_approve(store: Store) -> None:
    chat, (to_ann,) = await parked_on_transfers(store, ["Ann"])
    with pytest.raises(TypeError, match="list of questions"):
        await chat.complete(approve=to_ann)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="only with approve"):
        await chat.complete(by="ann@example.com")
    assert chat.waiting and [question.id for question in await store.pending_questions(chat.id)] == [to_ann.id]
