"""``chat.complete(approve=[...])``: approving and carrying on, with the freed call claimed by the approval's write."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import event

from tarry import Chat, Message, Question, Tool
from tarry.errors import MissingToolsError
from tarry.live import current_call
from tarry.messages import MessageDone
from tarry.store import Store
from tarry.testing import advance_clock
from tests.store.test_store import TRANSFER_TO_ANN, parked_on_transfers, plain_url, statements_sent
from tests.store.tools import all_tools, reactive_model


def tool_results(messages: list[Any]) -> list[str]:
    return [str(message.content) for message in messages if message.role == "tool"]


async def paid_ann_as_approved_on_the_web(store: Store, chat_id: str) -> None:
    """The chat's transfer to Ann ran once, and the trail shows ann@example.com approved it on the web."""
    assert tool_results(await store.messages(chat_id)) == ["Sent 1 to Ann"]
    (trail,) = await store.history(chat_id)
    assert (trail.decision, trail.outcome, trail.channel) == ("accept", "decided", "web")
    assert trail.by is not None and trail.by.id == "ann@example.com"


async def test_approving_in_complete_claims_the_freed_call_with_the_decision(database_url: str) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        parked, _ = await parked_on_transfers(store, ["Ann"])
        chat = await store.load_chat(parked.id, reactive_model(TRANSFER_TO_ANN), all_tools())
        (question,) = await chat.pending_questions()
        with statements_sent(store) as sent:
            reply = await chat.complete(approve=[question], by="ann@example.com", channel="web")
        assert reply is not None and reply.content == "All done." and not chat.waiting
        question = await chat.question(question)
        assert question.decision == "accept" and question.decided_by is not None
        await paid_ann_as_approved_on_the_web(other, chat.id)
    if not database_url.startswith("sqlite"):
        # The decision claims the call: then only the result and the reply, no claim of its own.
        assert sent[:1] == ["decision"] and "claim" not in sent, f"the call was claimed apart: {sent}"


async def test_stream_approves_the_questions_it_is_given_then_streams_the_chat_on(database_url: str) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        parked, _ = await parked_on_transfers(store, ["Ann"])
        chat = await store.load_chat(parked.id, reactive_model(TRANSFER_TO_ANN), all_tools())
        (question,) = await chat.pending_questions()
        with statements_sent(store) as sent:
            events = [event async for event in chat.stream(approve=[question.id], by="ann@example.com", channel="web")]
        done = [event.message.content for event in events if isinstance(event, MessageDone)]
        assert done == ["All done."] and chat.last_reply is not None and chat.last_reply.content == "All done."
        await paid_ann_as_approved_on_the_web(other, chat.id)
    if not database_url.startswith("sqlite"):
        assert sent[:1] == ["decision"] and "claim" not in sent, f"the call was claimed apart: {sent}"


async def test_stream_refuses_text_with_approve_and_one_question_for_approve(store: Store) -> None:
    chat, (to_ann,) = await parked_on_transfers(store, ["Ann"])
    with pytest.raises(TypeError, match="text or approve"):
        [event async for event in chat.stream("And Bob?", approve=[to_ann])]
    with pytest.raises(TypeError, match="list of questions"):
        [event async for event in chat.stream(approve=to_ann)]  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="only with approve"):
        [event async for event in chat.stream(channel="web")]
    assert chat.waiting and [question.id for question in await store.pending_questions(chat.id)] == [to_ann.id]


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


async def approval_held_in_its_hook(store: Store) -> tuple[Chat, asyncio.Task[Message | None], asyncio.Event]:
    """A chat of ``store`` parked on an approval of a transfer to Ann, loaded afresh and carried on with
    ``complete(approve=...)``, held in a decision hook once the approval is recorded: set the event to let it go on."""
    hooked, go_on = asyncio.Event(), asyncio.Event()

    async def hook(question: Question) -> None:
        hooked.set()
        await go_on.wait()

    parked, _ = await parked_on_transfers(store, ["Ann"])
    chat = await store.load_chat(parked.id, reactive_model([]), all_tools())
    (question,) = await chat.pending_questions()
    store.decision_hooks.append(hook)
    approving = asyncio.create_task(chat.complete(approve=[question]))
    async with asyncio.timeout(10):
        await hooked.wait()
    return chat, approving, go_on


async def test_on_postgresql_the_call_is_the_approving_chat_s_from_the_approval_on(postgres_url: str) -> None:
    async with Store(postgres_url) as store, Store(postgres_url) as other:
        chat, approving, go_on = await approval_held_in_its_hook(store)  # recorded; the call has not run yet
        elsewhere = await other.load_chat(chat.id, reactive_model([]), all_tools())
        await elsewhere.complete()
        assert elsewhere.waiting and tool_results(elsewhere.messages) == [], "another process ran the approved call"
        go_on.set()
        reply = await approving
    assert reply is not None and reply.content == "All done." and tool_results(chat.messages) == ["Sent 1 to Ann"]


async def test_approving_in_complete_a_question_that_a_running_call_awaits_elsewhere_leaves_the_call_to_it(
    database_url: str,
) -> None:
    runs: list[int] = []

    class Wire(Tool):
        """Wires money, asking for an approval while it runs."""

        async def execute(self, amount: int) -> str:
            runs.append(amount)
            live = current_call.get()
            assert live is not None
            asked = await live.ask(Question("", "approval", f"Wire {amount}?"))
            return f"wired: {asked.decision}"

    calls = [{"name": "wire", "arguments": {"amount": 5}}]
    async with Store(database_url, poll_interval=0.01) as store, Store(database_url) as other:
        await store.setup()
        chat = await store.create_chat(reactive_model(calls), [Wire()])
        running = asyncio.create_task(chat.ask("Wire 5"))
        async with asyncio.timeout(10):
            while not await store.pending_questions(chat.id):
                await asyncio.sleep(0.01)
        elsewhere = await other.load_chat(chat.id, reactive_model(calls), [Wire()])
        (approval,) = await elsewhere.pending_questions()
        async with asyncio.timeout(10):  # taking the call over would run the tool here, which asks again and waits
            await elsewhere.complete(approve=[approval])
        reply = await running
    assert reply is not None and reply.content == "All done."
    assert runs == [5] and tool_results(chat.messages) == ["wired: accept"]


async def test_on_postgresql_an_approval_that_finds_the_chat_changing_reads_the_change_and_uses_its_claim(
    postgres_url: str,
) -> None:
    async with Store(postgres_url) as store:
        parked, (to_ann,) = await parked_on_transfers(store, ["Ann"])
        chat = await store.load_chat(parked.id, reactive_model([]), all_tools())
        await chat.pending_questions()
        async with await psycopg.AsyncConnection.connect(plain_url(postgres_url)) as writer:
            # Another writer holds the chat's row: the approval's wake waits for it, then bumps the version again.
            await writer.execute("UPDATE tarry_chats SET version = version + 1 WHERE id = %s", (chat.id,))
            with statements_sent(store) as sent:
                approving = asyncio.create_task(chat.complete(approve=[to_ann]))
                async with asyncio.timeout(10):
                    while not await waits_on_a_lock(writer):
                        await asyncio.sleep(0.01)
                await writer.commit()
                reply = await approving
    assert reply is not None and reply.content == "All done."
    assert tool_results(chat.messages) == ["Sent 1 to Ann"]
    assert sent[:2] == ["decision", "load"] and "claim" not in sent, sent


async def waits_on_a_lock(connection: psycopg.AsyncConnection[Any]) -> bool:
    """Whether another session of the database waits on a lock (seen from ``connection``'s transaction)."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
    row = await (await connection.execute(query)).fetchone()
    return row is not None and row[0] > 0


async def test_on_postgresql_an_approval_s_claim_that_may_have_run_out_is_confirmed_before_the_call_runs(
    postgres_url: str,
) -> None:
    async with Store(postgres_url) as store:
        chat, approving, go_on = await approval_held_in_its_hook(store)
        advance_clock(store.lease + 1)  # the claim ran out unrenewed; nobody took the call meanwhile
        sent: list[str] = []
        event.listen(store.db.sync_engine, "before_cursor_execute", lambda _c, _k, sql, *_: sent.append(sql))
        go_on.set()
        reply = await approving
    assert reply is not None and reply.content == "All done." and tool_results(chat.messages) == ["Sent 1 to Ann"]
    renewed = [sql for sql in sent if sql.startswith("UPDATE tarry_tool_calls SET claimed_until")]
    claimed = [sql for sql in sent if sql.startswith("UPDATE tarry_tool_calls SET claimed_by")]
    assert len(renewed) == 1 and not claimed, "the chat did not confirm, with a renewal alone, that the claim held"


async def test_on_postgresql_an_approval_s_claim_that_ran_out_and_was_taken_over_runs_nothing(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(markers))  # the transfer tool writes a line each time it runs
    async with Store(postgres_url) as store, Store(postgres_url) as other:
        chat, approving, go_on = await approval_held_in_its_hook(store)
        advance_clock(store.lease + 1)  # the claim ran out: another process takes the call over
        elsewhere = await other.load_chat(chat.id, reactive_model([]), all_tools())
        await elsewhere.complete()
        (interrupted,) = tool_results(elsewhere.messages)
        assert "interrupted" in interrupted
        go_on.set()
        reply = await approving
    assert reply is not None and reply.content == "All done."
    assert tool_results(chat.messages) == [interrupted]
    ran = [line for line in markers.read_text().splitlines() if line.startswith("transfer")]
    assert ran == [], "the tool ran after another process closed its call as interrupted"


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


async def test_a_call_claimed_with_its_approval_in_stream_is_given_back_when_the_chat_cannot_run_it(
    database_url: str,
) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        parked, _ = await parked_on_transfers(store, ["Ann"])
        toolless = await store.load_chat(parked.id, reactive_model([]), [])
        (question,) = await toolless.pending_questions()
        with pytest.raises(MissingToolsError, match="transfer_money"):
            [event async for event in toolless.stream(approve=[question])]
        elsewhere = await other.load_chat(parked.id, reactive_model([]), all_tools())
        reply = await elsewhere.complete()  # at once, not once a lease ran out
        assert reply is not None and reply.content == "All done."
        assert tool_results(elsewhere.messages) == ["Sent 1 to Ann"]


async def test_a_caller_cancelled_after_the_approval_claimed_the_call_gives_the_call_back(database_url: str) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        chat, approving, _ = await approval_held_in_its_hook(store)  # the approval (and its claim) is recorded
        approving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await approving
        elsewhere = await other.load_chat(chat.id, reactive_model([]), all_tools())
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


async def test_on_postgresql_an_approval_claims_nothing_along_on_a_call_changed_since_the_chat_read_it(
    postgres_url: str,
) -> None:
    """Another writer changed the call after the chat read it: the approval's statement records the approval
    alone, and the chat claims the call as usual, having read the change."""
    async with Store(postgres_url) as store, Store(postgres_url) as other:
        parked, (to_ann,) = await parked_on_transfers(store, ["Ann"])
        chat = await store.load_chat(parked.id, reactive_model([]), all_tools())
        await chat.pending_questions()
        with psycopg.connect(plain_url(postgres_url), autocommit=True) as writer:
            writer.execute("UPDATE tarry_tool_calls SET version = version + 1 WHERE chat_id = %s", (chat.id,))
        with statements_sent(store) as sent:
            reply = await chat.complete(approve=[to_ann])
        assert reply is not None and reply.content == "All done."
        assert tool_results(await other.messages(chat.id)) == ["Sent 1 to Ann"]
    assert sent[:1] == ["decision"] and sent.count("claim") == 1, f"the call was claimed along or twice: {sent}"
