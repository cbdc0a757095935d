"""The store through its public API: save, load, list, answer — on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, event, make_url, select, text, update

from tarry import Chat, Message, Principal, Question, Task, Tool, ToolCall
from tarry.errors import (
    ChatNotFoundError,
    CorruptStateError,
    InvalidAnswerError,
    PendingToolCallsError,
    QuestionExpiredError,
    TarryError,
    ToolCallRunningError,
    UnknownQuestionError,
)
from tarry.live import current_call
from tarry.messages import ModelRequest
from tarry.questions import AnswerNeeded
from tarry.store import Store, StoreUnavailableError
from tarry.store import journal as store_journal
from tarry.store.engine import database_url
from tarry.store.journal import fetch_chat, fetch_tail
from tarry.store.schema import HEAD
from tarry.store.tables import chats, metadata, tool_calls
from tarry.testing import ScriptedModel, advance_clock
from tarry.tools import ask, tool
from tests.store.tools import PickColour, SlowJob, TransferMoney, all_tools, reactive_model

PAY_AND_PAINT = [
    {"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}},
    {"name": "pick_colour", "arguments": {"wall": "north"}},
    {"name": "slow_job", "arguments": {"job": "backup"}},
]


async def park(store: Store, calls: list[dict] = PAY_AND_PAINT) -> str:
    chat = await store.create_chat(reactive_model(calls), all_tools(), "Be brief.")
    reply = await chat.ask("Pay Bob 5, paint the north wall, back up.")
    assert reply is not None and len(reply.tool_calls) == len(calls)
    assert chat.waiting
    return chat.id


async def test_a_parked_chat_is_carried_on_by_a_fresh_store(database_url: str) -> None:
    async with Store(database_url) as store:
        await store.setup()
        chat_id = await park(store)
    async with Store(database_url) as other:
        questions = await other.pending_questions(chat_id)
        assert [question.kind for question in questions] == ["approval", "form"]
        approval, colour = questions
        assert approval.tool_call is not None and approval.tool_call.arguments == {"to": "Bob", "amount": 5}
        assert [field.name for field in colour.fields] == ["colour", "coats"]
        assert [task.data for task in await other.pending_tasks(chat_id)] == [{"job": "backup", "checks": 0}]
        assert await other.approve(approval.id) is True
        assert await other.answer(colour.id, {"colour": "blue"}) is True
    async with Store(database_url) as third:
        chat = await third.load_chat(chat_id, reactive_model(PAY_AND_PAINT), all_tools())
        assert chat.instructions == "Be brief."
        assert (await chat.complete()) is not None
        assert chat.waiting  # the job needs a second check
        reply = await chat.complete()
        assert reply is not None and reply.content == "All done."
    async with Store(database_url) as fourth:
        chat = await fourth.load_chat(chat_id, reactive_model(PAY_AND_PAINT), all_tools())
        results = {message.content for message in chat.messages if message.role == "tool"}
        assert results == {"Sent 5 to Bob", "north: 1 coat(s) of blue", "backup finished after 2 checks"}
        assert [message.role for message in chat.messages] == ["user", "assistant", "tool", "tool", "tool", "assistant"]
        assert await fourth.pending_questions(chat_id) == []
        assert await fourth.pending_tasks(chat_id) == []


async def test_pending_questions_across_chats_in_call_order(store: Store) -> None:
    first = await park(store)
    second = await park(store)
    everything = await store.pending_questions()
    assert [question.chat_id for question in everything] == [first, first, second, second]
    assert [question.kind for question in everything] == ["approval", "form"] * 2
    assert len({question.id for question in everything}) == 4
    assert [question.chat_id for question in await store.pending_questions(second)] == [second, second]


async def test_pending_questions_in_pages_survive_answers_and_new_questions(store: Store) -> None:
    chats = [await park(store) for _ in range(3)]
    everything = await store.pending_questions()
    first = await store.pending_questions(limit=4)
    assert [question.id for question in first] == [question.id for question in everything[:4]]
    assert first.next_cursor is not None
    assert await store.decline(first[3].id) is True  # the page's last question is answered meanwhile
    assert await store.approve(everything[4].id) is True  # and one that the next page would have shown
    newer = await park(store)  # and a chat asks more
    second = await store.pending_questions(limit=4, cursor=first.next_cursor)
    assert [question.chat_id for question in second] == [chats[2], newer, newer]
    assert second.next_cursor is None
    assert (await store.pending_questions()).next_cursor is None
    assert [q.id for q in await store.pending_questions(chats[0], limit=1, cursor=first.next_cursor)] == []


class NeedsLogin:
    """A tool source that cannot list its tools before a person logs in: its chat parks on a question of its own."""

    async def list_tools(self) -> list[Tool]:
        question = Question(id="", kind="url", message="Log in, please.", url="https://login.example/", source="idp")
        raise AnswerNeeded("Log in first", question)


async def test_pending_questions_in_pages_of_one_list_every_chat_s_own_question_once(store: Store) -> None:
    calls = [await park(store) for _ in range(2)]
    own = []
    for _ in range(3):  # each chat numbers its own questions from 0: the pages tell them apart all the same
        chat = await store.create_chat(reactive_model(PAY_AND_PAINT), [NeedsLogin()])
        assert await chat.ask("Pay Bob 5") is None
        own.append(chat.id)
    everything = await store.pending_questions()
    assert {question.chat_id for question in everything[:3]} == set(own)
    assert [question.chat_id for question in everything[3:]] == [calls[0], calls[0], calls[1], calls[1]]
    for limit in (1, 2, 3):
        walked, cursor = [], None
        while True:
            page = await store.pending_questions(limit=limit, cursor=cursor)
            walked += [question.id for question in page]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert walked == [question.id for question in everything]


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "10"])
async def test_pending_questions_refuse_a_limit_that_is_not_a_positive_int(store: Store, limit: object) -> None:
    with pytest.raises(ValueError, match="limit must be a positive int"):
        await store.pending_questions(limit=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize("cursor", ["", "nonsense", "cTA6MjoxMg", "%%%"])
async def test_pending_questions_refuse_a_cursor_they_did_not_make(store: Store, cursor: str) -> None:
    with pytest.raises(ValueError, match="is not a cursor from a page of pending questions"):
        await store.pending_questions(limit=10, cursor=cursor)


async def test_first_decision_wins_and_later_ones_change_nothing(store: Store) -> None:
    chat_id = await park(store)
    approval, colour = await store.pending_questions(chat_id)
    assert await store.decline(approval.id, "Not this month") is True
    assert await store.approve(approval.id) is False
    assert await store.decline(approval.id, "other note") is False
    assert await store.answer(colour.id, colour="red", coats="2") is True
    assert await store.answer(colour.id, colour="blue") is False
    decided = await store.question(approval.id)
    assert (decided.decision, decided.note) == ("decline", "Not this month")
    assert (await store.question(colour.id)).answer == {"colour": "red", "coats": 2}


async def test_a_decline_note_reaches_the_model_from_another_process(database_url: str) -> None:
    async with Store(database_url) as store:
        await store.setup()
        chat_id = await park(store, PAY_AND_PAINT[:1])
        (approval,) = await store.pending_questions(chat_id)
        await store.decline(approval.id, "Bob was paid yesterday")
    async with Store(database_url) as other:
        chat = await other.load_chat(chat_id, reactive_model(PAY_AND_PAINT[:1]), all_tools())
        await chat.complete()
        result = json.loads(chat.messages[2].content)
        assert result == {"error": "The user declined the transfer_money call.", "note": "Bob was paid yesterday"}


async def test_bad_answers_record_nothing(store: Store) -> None:
    chat_id = await park(store)
    approval, colour = await store.pending_questions(chat_id)
    with pytest.raises(UnknownQuestionError, match="no-such-id"):
        await store.answer("no-such-id", "red")
    with pytest.raises(InvalidAnswerError) as invalid:
        await store.answer(colour.id, colour="green", coats="many")
    assert set(invalid.value.errors) == {"colour", "coats"}
    with pytest.raises(InvalidAnswerError):
        await store.answer(approval.id, "yes please")
    assert [question.id for question in await store.pending_questions(chat_id)] == [approval.id, colour.id]


async def test_an_expired_question_is_not_listed_and_cannot_be_answered(store: Store) -> None:
    class QuickApproval(TransferMoney):
        name = "transfer_money"
        approval_ttl = 60

    chat = await store.create_chat(reactive_model(PAY_AND_PAINT[:1]), [QuickApproval()])
    await chat.ask("Pay Bob")
    (approval,) = await store.pending_questions(chat.id)
    assert approval.expires_at is not None
    advance_clock(61)
    assert await store.pending_questions(chat.id) == []
    with pytest.raises(QuestionExpiredError):
        await store.approve(approval.id)
    reply = await chat.complete()
    assert reply is not None and reply.content == "All done."
    assert "lapsed" in json.loads(chat.messages[2].content)["error"]


async def test_an_old_question_of_a_closed_call_is_never_answered_anew(store: Store) -> None:
    chat_id = await park(store, PAY_AND_PAINT[1:2])
    (colour,) = await store.pending_questions(chat_id)
    chat = await store.load_chat(chat_id, reactive_model(PAY_AND_PAINT[1:2]), all_tools())
    await chat.cancel()
    assert await store.answer(colour.id, colour="red") is False


async def test_a_corrupt_pause_state_names_the_call_and_spares_other_chats(store: Store) -> None:
    broken = await park(store, PAY_AND_PAINT[2:])
    healthy = await park(store, PAY_AND_PAINT[2:])
    corrupt = update(tool_calls).where(tool_calls.c.chat_id == broken).values(state={"task": {"status": "sleepy"}})
    await store.db.run_write(lambda connection: connection.execute(corrupt))
    with pytest.raises(CorruptStateError, match=r"slow_job call .* cannot be loaded: Unknown task status 'sleepy'"):
        await store.load_chat(broken, reactive_model(PAY_AND_PAINT[2:]), all_tools())
    chat = await store.load_chat(healthy, reactive_model(PAY_AND_PAINT[2:]), all_tools())
    await chat.complete()
    assert (await chat.complete()).content == "All done."


async def test_load_chat_of_an_unknown_id(store: Store) -> None:
    with pytest.raises(ChatNotFoundError, match="nope"):
        await store.load_chat("nope")


async def test_an_unreachable_database_is_a_clear_error_not_a_hang() -> None:
    started = time.monotonic()
    async with Store("postgresql://postgres@127.0.0.1:1/none") as store:
        with pytest.raises(StoreUnavailableError, match="Cannot reach the database at postgresql"):
            await store.setup()
    assert time.monotonic() - started < 30


async def test_a_sqlite_file_in_a_missing_folder_is_a_clear_error(tmp_path) -> None:
    async with Store(f"sqlite:///{tmp_path}/missing/folder/tarry.db") as store:
        with pytest.raises(StoreUnavailableError, match="Cannot reach the database"):
            await store.setup()


def test_urls_map_to_async_drivers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert database_url("sqlite:///x.db").drivername == "sqlite+pysqlite"
    assert database_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert database_url("postgresql+psycopg://u@h/db").drivername == "postgresql+psycopg"
    assert database_url("sqlite+aiosqlite:///x.db").drivername == "sqlite+pysqlite"
    monkeypatch.setenv("TARRY_DATABASE_URL", "sqlite:///from-env.db")
    assert database_url(None).database == "from-env.db"
    monkeypatch.delenv("TARRY_DATABASE_URL")
    assert database_url(None).database == "tarry.db"
    with pytest.raises(ValueError, match="Unsupported database URL scheme 'mysql'"):
        database_url("mysql://u@h/db")
    with pytest.raises(ValueError, match="Not a database URL"):
        database_url("::nonsense::")
    with pytest.raises(ValueError, match="lease must be a positive"):
        Store("sqlite:///x.db", lease=0)


async def test_the_migrations_build_exactly_the_tables(store: Store) -> None:
    differences, version = await store.db.run_read(
        lambda connection: (
            compare_metadata(MigrationContext.configure(connection), metadata),
            connection.scalar(text("SELECT version_num FROM alembic_version")),
        )
    )
    assert differences == []
    assert version == HEAD
    await store.setup()  # running it again changes nothing


async def test_tasks_are_rebuilt_with_the_tools_own_task_class(store: Store) -> None:
    class Polled(Task):
        pass

    class PolledJob(SlowJob):
        name = "slow_job"
        task_class = Polled

    chat_id = await park(store, PAY_AND_PAINT[2:])
    chat = await store.load_chat(chat_id, reactive_model(PAY_AND_PAINT[2:]), [PolledJob()])
    (task,) = await chat.pending_tasks()
    assert type(task) is Polled
    assert task.tool_call is not None and task.tool_call.name == "slow_job"
    assert task.to_dict() == {"task": {"status": "working", "status_message": "queued", "poll_interval": 0.1,
                                       "data": {"job": "backup", "checks": 0}}}  # fmt: skip


async def test_a_live_chat_sees_decisions_made_through_another_store(database_url: str) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        await store.setup()
        chat = await store.create_chat(reactive_model(PAY_AND_PAINT[1:2]), [PickColour()])
        await chat.ask("Paint")
        (colour,) = await chat.pending_questions()
        assert await other.answer(colour.id, colour="red") is True
        assert await chat.answer(colour, colour="blue") is False
        reply = await chat.complete()
        assert reply is not None and reply.content == "All done."
        assert chat.messages[2].content == "north: 1 coat(s) of red"


async def test_a_running_call_keeps_its_claim_past_the_lease(database_url: str) -> None:
    started, finish_now = asyncio.Event(), asyncio.Event()
    runs = []

    class LongJob(Tool):
        """Runs for several leases."""

        async def execute(self, job: str) -> str:
            runs.append(job)
            started.set()
            await finish_now.wait()
            return "finished"

    calls = [{"name": "long_job", "arguments": {"job": "j"}}]
    async with Store(database_url, lease=0.3) as store, Store(database_url, lease=0.3) as other:
        await store.setup()
        chat = await store.create_chat(reactive_model(calls), [LongJob()])
        running = asyncio.create_task(chat.ask("Run it"))
        await started.wait()
        until = time.monotonic() + 1.2  # four leases: only renewal keeps the claim
        while time.monotonic() < until:
            rival = await other.load_chat(chat.id, reactive_model(calls), [LongJob()])
            assert await rival.complete() is not None
            assert rival.waiting, "a second process took over a call whose claim is being renewed"
            await asyncio.sleep(0.1)
        finish_now.set()
        reply = await running
    assert reply is not None and reply.content == "All done."
    assert runs == ["j"]


async def test_declining_a_question_whose_call_runs_right_now(database_url: str) -> None:
    cancelling, go_on = asyncio.Event(), asyncio.Event()

    class SlowToCancel(Task):
        async def cancel(self) -> Task:
            cancelling.set()
            await go_on.wait()
            self.status = "cancelled"
            return self

    class Survey(Tool):
        """Asks a question on a task that takes a while to cancel."""

        task_class = SlowToCancel

        def execute(self, topic: str) -> Task:
            return SlowToCancel(status="input_required").with_question(ask("Your view?", view=str))

    calls = [{"name": "survey", "arguments": {"topic": "tea"}}]
    async with Store(database_url) as store, Store(database_url) as other:
        await store.setup()
        chat = await store.create_chat(reactive_model(calls), [Survey()])
        await chat.ask("Ask me")
        (question,) = await other.pending_questions(chat.id)
        cancel = asyncio.create_task(chat.cancel())
        await cancelling.wait()
        with pytest.raises(ToolCallRunningError, match="running right now"):
            await other.decline(question.id, "no")
        assert (await other.question(question.id)).decision is None
        go_on.set()
        await cancel
        assert (await other.question(question.id)).decision == "cancel"
        assert await other.decline(question.id, "too late") is False
    assert "cancelled" in json.loads(chat.messages[2].content)["error"]


async def test_decision_hooks_run_for_every_recorded_decision(store: Store) -> None:
    seen: list[tuple[str, str | None]] = []

    async def remember(question: Question) -> None:
        seen.append((question.kind, question.decision))

    store.decision_hooks.append(remember)
    store.decision_hooks.append(lambda question: 1 / 0)  # a failing hook is logged, not raised
    chat_id = await park(store)
    approval, colour = await store.pending_questions(chat_id)
    chat = await store.load_chat(chat_id, reactive_model(PAY_AND_PAINT), all_tools())
    assert await chat.approve(approval) is True
    assert await store.answer(colour.id, colour="red") is True
    assert await store.answer(colour.id, colour="blue") is False
    assert seen == [("approval", "accept"), ("form", "accept")]


async def test_a_live_chat_answers_a_question_another_process_asked(database_url: str) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        await store.setup()
        holder = await store.create_chat(reactive_model(PAY_AND_PAINT[1:2]), [PickColour()])
        asker = await other.load_chat(holder.id, reactive_model(PAY_AND_PAINT[1:2]), [PickColour()])
        await asker.ask("Paint")
        (colour,) = await other.pending_questions(holder.id)
        assert holder.messages == []  # the holder has not looked since
        assert await holder.answer(colour.id, colour="blue") is True
        assert (await other.question(colour.id)).answer == {"colour": "blue", "coats": 1}


async def test_an_id_with_a_nul_byte_names_nothing(store: Store) -> None:
    chat_id = await park(store)
    with pytest.raises(UnknownQuestionError):
        await store.question("a\x00b")
    with pytest.raises(UnknownQuestionError):
        await store.approve("\x00")
    assert await store.pending_questions("\x00") == []
    assert await store.pending_tasks(f"{chat_id}\x00") == []
    assert len(await store.pending_questions(chat_id)) == 2


class ReasoningModel:
    """A model whose replies carry provider state, on the message and on its call, as adapters keep it."""

    name = "reasoning:test"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> Message:
        self.requests.append(request)
        if request.messages[-1].role == "tool":
            return Message("assistant", "Paid.")
        call = ToolCall("call_1", "transfer_money", {"to": "Bob", "amount": 5}, provider_data=CALL_STATE)
        return Message("assistant", "", tool_calls=(call,), provider_data=MESSAGE_STATE)


MESSAGE_STATE = {
    "anthropic": {"thinking": [{"type": "thinking", "thinking": "Pay Bob — 5 €.", "signature": "EqQB+/=="}]},
    "other": {"z": 1, "a": [True, None, 2.5]},
}
CALL_STATE = {"gemini": {"thought_signature": "c2lnbmF0dXJl"}}


async def test_provider_data_round_trips_through_the_store(database_url: str) -> None:
    async with Store(database_url) as store:
        await store.setup()
        chat = await store.create_chat(ReasoningModel(), all_tools())
        await chat.ask("Pay Bob 5")
        assert chat.waiting
    async with Store(database_url) as other:
        (question,) = await other.pending_questions(chat.id)
        assert question.tool_call is not None and question.tool_call.arguments == {"to": "Bob", "amount": 5}
        model = ReasoningModel()
        loaded = await other.load_chat(chat.id, model, all_tools())
        (stored,) = [message for message in loaded.messages if message.role == "assistant"]
        assert stored.provider_data == MESSAGE_STATE
        assert list(stored.provider_data["other"]) == ["z", "a"]
        assert stored.tool_calls[0].provider_data == CALL_STATE
        assert loaded.messages[0].provider_data is None
        assert await other.approve(question.id)
        loaded = await other.load_chat(chat.id, model, all_tools())
        reply = await loaded.complete()
    assert reply is not None and reply.content == "Paid."
    assert model.requests[0].messages[1] == stored


async def test_a_write_whose_caller_is_cancelled_before_it_commits_rolls_back(store: Store) -> None:
    chat = await store.create_chat(instructions="before")
    entered, go_on = threading.Event(), threading.Event()

    def write(connection: Connection) -> None:
        connection.execute(update(chats).where(chats.c.id == chat.id).values(instructions="after"))
        entered.set()
        assert go_on.wait(10), "the test never let the transaction go on"

    writing = asyncio.create_task(store.db.run_write(write))
    assert await asyncio.to_thread(entered.wait, 10)
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing
    go_on.set()  # the thread finishes the work, finds its caller gone, and rolls back

    # A write that locks the same row waits until that transaction has ended, either way:
    locked = select(chats.c.instructions).where(chats.c.id == chat.id).with_for_update()
    assert await store.db.run_write(lambda connection: connection.execute(locked).scalar_one()) == "before"


async def test_a_chat_cancelled_while_it_claims_a_call_leaves_the_call_to_the_next_process(database_url: str) -> None:
    pay_bob = [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}]
    async with Store(database_url) as store:
        await store.setup()
        chat = await store.create_chat(reactive_model(pay_bob), [TransferMoney()])
        await chat.ask("Pay Bob 5")
        [question] = await chat.pending_questions()
        assert await chat.approve(question)
        if store.db.is_sqlite:
            await cancel_while_the_claim_runs(store, chat)
        else:
            plain = plain_url(database_url)
            with psycopg.connect(plain) as other:  # another process holds the call's row: the claim waits
                other.execute("SELECT id FROM tarry_tool_calls WHERE chat_id = %s FOR UPDATE", (chat.id,))
                carrying = asyncio.create_task(chat.complete())
                await waiting_for_a_lock(plain, "UPDATE tarry_tool_calls SET claimed_by")
                carrying.cancel()  # while the claim's statement waits on the server
                other.commit()
                with pytest.raises(asyncio.CancelledError):
                    await carrying
    async with Store(database_url, lease=60) as other:  # the lease a lingering claim would keep for a minute
        carried = await other.load_chat(chat.id, reactive_model(pay_bob), [TransferMoney()])
        reply = await carried.complete()
        assert reply is not None and reply.content == "All done."
        assert [message.content for message in carried.messages if message.role == "tool"] == ["Sent 5 to Bob"]


async def cancel_while_the_claim_runs(store: Store, chat: Chat) -> None:
    """Cancel ``chat.complete()`` while its claim's statement runs in a worker thread (SQLite)."""
    claiming, go_on = threading.Event(), threading.Event()

    def hold_the_claim(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE TARRY_TOOL_CALLS SET CLAIMED_BY"):
            claiming.set()
            assert go_on.wait(10), "the test never let the claim go on"

    event.listen(store.db.sync_engine, "after_cursor_execute", hold_the_claim)
    carrying = asyncio.create_task(chat.complete())
    assert await asyncio.to_thread(claiming.wait, 10)
    carrying.cancel()
    go_on.set()
    with pytest.raises(asyncio.CancelledError):
        await carrying
    event.remove(store.db.sync_engine, "after_cursor_execute", hold_the_claim)


async def test_a_chat_s_messages_and_version_read_from_the_database_alone(store: Store) -> None:
    pay_bob = [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}]
    chat = await store.create_chat(reactive_model(pay_bob), [TransferMoney()])
    created = await store.chat_version(chat.id)
    await chat.ask("Pay Bob 5")
    asked = await store.chat_version(chat.id)
    assert asked > created
    assert [(message.role, message.content) for message in await store.messages(chat.id)] == [
        ("user", "Pay Bob 5"),
        ("assistant", ""),
    ]
    [question] = await store.pending_questions(chat.id)
    assert await store.approve(question.id)
    decided = await store.chat_version(chat.id)
    assert decided > asked, "a decision is news to a page showing the chat"
    assert await store.chat_version(chat.id) == decided, "reading changes nothing"
    await chat.complete()
    assert [message.content for message in await store.messages(chat.id)][2:] == ["Sent 5 to Bob", "All done."]
    assert await store.chat_version(chat.id) > decided
    for unknown in ("no-such-chat", "nul\x00"):
        with pytest.raises(ChatNotFoundError, match="No chat has the id"):
            await store.messages(unknown)
        with pytest.raises(ChatNotFoundError, match="No chat has the id"):
            await store.chat_version(unknown)


async def test_a_store_closed_while_a_transaction_runs_still_closes_its_connections_when_cancelled(
    postgres_url: str,
) -> None:
    url, name = named(postgres_url)
    store = Store(url)
    await store.setup()
    entered, go_on = threading.Event(), threading.Event()

    def work(connection: Connection) -> None:
        entered.set()
        assert go_on.wait(10), "the test never let the transaction go on"

    running = asyncio.create_task(store.db.run_read(work))
    assert await asyncio.to_thread(entered.wait, 10)
    before = set(threading.enumerate())
    closing = asyncio.create_task(store.close())
    deadline = time.monotonic() + 10
    while not any(thread.name == "tarry-close" for thread in set(threading.enumerate()) - before):
        assert time.monotonic() < deadline, "close() never started closing"
        await asyncio.sleep(0.01)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert await connections_named(postgres_url, name) >= 1, "the running transaction's connection stays open"
    go_on.set()
    await running
    await until_no_connections_named(postgres_url, name, "the store's connections stayed open")


def named(url: str) -> tuple[str, str]:
    """``url`` with a new application name for its connections, and that name."""
    name = f"tarry-test-{uuid.uuid4().hex[:8]}"
    return f"{url}&application_name={name}", name


async def connections_named(url: str, application: str) -> int:
    """How many connections to the server ``url`` names have the application name ``application``."""
    async with Store(url) as other:
        query = text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name")
        return int(await other.db.run_read(lambda connection: connection.scalar(query, {"name": application})))


async def until_no_connections_named(url: str, application: str, failure: str) -> None:
    """Returns once no connection to the server ``url`` names has the application name ``application``; fails
    with ``failure`` after 10 s."""
    deadline = time.monotonic() + 10
    while await connections_named(url, application):
        assert time.monotonic() < deadline, failure
        await asyncio.sleep(0.05)


def plain_url(url: str) -> str:
    """``url`` as psycopg takes it (no SQLAlchemy driver name)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def test_postgresql_reads_see_one_snapshot_and_writes_run_at_the_server_s_default(postgres_url: str) -> None:
    show = text("SHOW transaction_isolation")
    async with Store(postgres_url) as store:
        await store.setup()
        for _ in range(3):  # on each worker thread's kept connection, in turns
            assert await store.db.run_read(lambda connection: connection.scalar(show)) == "repeatable read"
            assert await store.db.run_write(lambda connection: connection.scalar(show)) == "read committed"
            in_transaction = await store.db.run_alone(
                lambda connection: connection.scalar(text("SELECT now() = statement_timestamp()")), write=False
            )
            assert in_transaction is True, "a statement alone runs outside any transaction"


async def test_on_postgresql_a_call_s_result_and_the_call_s_close_are_one_statement(postgres_url: str) -> None:
    calls = [{"name": "transfer_money", "arguments": {"to": "Ann", "amount": 1}}]
    async with Store(postgres_url) as store:
        await store.setup()
        chat = await store.create_chat(reactive_model(calls), all_tools())
        await chat.ask("Pay Ann")
        (question,) = await chat.pending_questions()
        sent: list[str] = []

        def note(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            sent.append(statement)

        event.listen(store.db.sync_engine, "before_cursor_execute", note)
        await chat.approve(question)
        assert [statement.split()[:2] for statement in sent] == [["WITH", "decided"]], (
            "a chat's own decision reads nothing first: the statement checks the question as it writes"
        )
        del sent[:]
        await chat.complete()
        event.remove(store.db.sync_engine, "before_cursor_execute", note)
    assert sent[0].startswith("UPDATE tarry_tool_calls SET claimed_by") and "EXISTS" in sent[0], (
        "carrying on, the chat claims the call first, and the claim checks that the chat has not changed"
    )
    assert not [statement for statement in sent if statement.startswith("SELECT tarry_chats.version")]
    assert len([statement for statement in sent if statement.startswith("WITH held")]) == 1
    assert not [statement for statement in sent if statement.startswith(("INSERT", "UPDATE tarry_chats"))]
    async with Store(postgres_url) as other:
        loaded = await other.load_chat(chat.id, reactive_model(calls), all_tools())
        assert [message.content for message in loaded.messages[2:]] == ["Sent 1 to Ann", "All done."]
        assert [message.role for message in await other.messages(chat.id)] == ["user", "assistant", "tool", "assistant"]
        assert await other.chat_version(chat.id) == await chat_version_from_rows(other, chat.id)


async def parked_on_transfers(store: Store, names: list[str], **options: Any) -> tuple[Chat, list[Question]]:
    """A new chat of ``store`` parked on the approvals of a transfer of 1 to each of ``names``, in order."""
    await store.setup()
    calls = [{"name": "transfer_money", "arguments": {"to": name, "amount": 1}} for name in names]
    chat = await store.create_chat(reactive_model(calls), all_tools(), **options)
    await chat.ask(f"Pay {', '.join(names)}")
    return chat, await chat.pending_questions()


STATEMENT_KINDS = {
    "WITH decided": "decision",
    "SELECT tarry_chats.version": "version",
    "SELECT (SELECT json_build_array": "load",
    "UPDATE tarry_tool_calls SET claimed_by": "claim",
    "SELECT tarry_tool_calls.version": "why not",
}
"""What a statement does, by how it starts: the ones the tests of a chat's looks and claims tell apart."""


@contextmanager
def statements_sent(store: Store) -> Iterator[list[str]]:
    """The kinds (:data:`STATEMENT_KINDS`) of the statements ``store`` sends in the block, in order."""
    sent: list[str] = []

    def note(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        sent.extend(kind for start, kind in STATEMENT_KINDS.items() if statement.startswith(start))

    event.listen(store.db.sync_engine, "before_cursor_execute", note)
    try:
        yield sent
    finally:
        event.remove(store.db.sync_engine, "before_cursor_execute", note)


async def test_start_chat_saves_the_chat_with_its_first_message_then_runs_it(database_url: str) -> None:
    transfer = [{"name": "transfer_money", "arguments": {"to": "Ann", "amount": 1}}]
    async with Store(database_url) as store, Store(database_url) as other:
        await store.setup()
        sent: list[str] = []
        event.listen(store.db.sync_engine, "before_cursor_execute", lambda _c, _k, sql, *_: sent.append(sql))
        chat = await store.start_chat("Pay Ann", reactive_model(transfer), all_tools(), "Be brief", agent="payer")
        assert chat.waiting and chat.last_reply is not None and chat.last_reply.tool_calls
        if not database_url.startswith("sqlite"):  # the chat with its message, the reply with its call, the look for
            # standing grants of its approval: nothing else
            assert len(sent) == 3 and " ".join(sent[0].split()).startswith("WITH created AS (INSERT INTO tarry_chats")
            assert " ".join(sent[2].split()).startswith("SELECT tarry_grants.id,")
        (summary,) = await other.list_chats()
        assert (summary.id, summary.agent, summary.messages, summary.open_calls) == (chat.id, "payer", 2, 1)
        elsewhere = await other.load_chat(chat.id, reactive_model(transfer), all_tools())
        assert elsewhere.instructions == "Be brief" and elsewhere.messages == chat.messages
        (question,) = await elsewhere.pending_questions()
        assert await elsewhere.approve(question)
        assert (await elsewhere.complete()) == elsewhere.last_reply and not elsewhere.waiting


async def test_start_chat_writes_nothing_for_text_it_refuses_and_gives_the_turn_back_when_the_model_fails(
    database_url: str,
) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        await store.setup()
        with pytest.raises(ValueError, match="needs the user's text"):
            await store.start_chat("  ", reactive_model([]), all_tools())
        assert await other.list_chats() == []
        with pytest.raises(TarryError, match="ran out of turns") as raised:
            await store.start_chat("Hello", ScriptedModel([]), all_tools())
        (summary,) = await other.list_chats()
        assert [note for note in raised.value.__notes__ if summary.id in note], "the error does not name the chat"
        assert summary.messages == 1  # the user's message stays, as after ask()
        elsewhere = await other.load_chat(summary.id, ScriptedModel(["Hi"]), all_tools())
        assert (await elsewhere.complete()) == Message("assistant", "Hi"), "the turn was still held"


async def test_the_first_look_after_a_load_takes_the_rows_the_load_read_and_the_next_reads_again(
    database_url: str,
) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        parked, (to_ann,) = await parked_on_transfers(store, ["Ann"])
        chat = await store.load_chat(parked.id, reactive_model([]), all_tools())
        with statements_sent(store) as first:
            assert [question.id for question in await chat.pending_questions()] == [to_ann.id]
        assert first == [], "the first look after the load asked the database again"
        assert await other.decline(to_ann.id) is True
        with statements_sent(store) as second:
            assert await chat.pending_questions() == []
        assert second[:1] == ["version"], "a later look took the load's rows too"


TRANSFER_TO_ANN = [{"name": "transfer_money", "arguments": {"to": "Ann", "amount": 1}}]


async def loaded_then_asked_elsewhere(store: Store, other: Store) -> tuple[Chat, Question]:
    """A finished chat loaded by ``store``, which ``other`` then asks again: its new call waits on an approval."""
    await store.setup()
    finished = await store.start_chat("Hello", reactive_model([]), all_tools())
    chat = await store.load_chat(finished.id, reactive_model(TRANSFER_TO_ANN), all_tools())
    elsewhere = await other.load_chat(finished.id, reactive_model(TRANSFER_TO_ANN), all_tools())
    await elsewhere.ask("Pay Ann")
    (question,) = await other.pending_questions(finished.id)
    return chat, question


async def test_a_chat_just_loaded_finds_a_question_asked_since_and_decides_it(database_url: str) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        chat, question = await loaded_then_asked_elsewhere(store, other)
        assert await chat.approve(question.id) is True  # it looks for the question it did not know
        assert (await other.question(question.id)).decision == "accept"


async def test_a_chat_just_loaded_cancels_the_calls_opened_since(database_url: str) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        chat, _ = await loaded_then_asked_elsewhere(store, other)
        await chat.cancel()
        assert await other.pending_questions(chat.id) == []


async def test_a_chat_just_loaded_names_the_calls_that_wait_when_asked_again(database_url: str) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        chat, _ = await loaded_then_asked_elsewhere(store, other)
        with pytest.raises(PendingToolCallsError, match="transfer_money"):
            await chat.ask("And Bob")
        assert chat.waiting


async def test_a_decision_that_lost_makes_the_next_listing_read_again(database_url: str) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        parked, (to_ann,) = await parked_on_transfers(store, ["Ann"])
        chat = await store.load_chat(parked.id, reactive_model([]), all_tools())
        assert await other.approve(to_ann.id) is True
        assert await chat.approve(to_ann) is False
        assert await chat.pending_questions() == [], "the chat listed a question another process decided"


async def test_a_listing_long_after_the_load_reads_again(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_journal, "FRESH_FOR", 0.0)  # every listing comes "long" after its load
    async with Store(database_url) as store, Store(database_url) as other:
        parked, (to_ann,) = await parked_on_transfers(store, ["Ann"])
        chat = await store.load_chat(parked.id, reactive_model([]), all_tools())
        assert await other.decline(to_ann.id) is True
        with statements_sent(store) as sent:
            assert await chat.pending_questions() == []
        assert sent[:1] == ["version"]


async def test_a_chat_changed_by_another_process_after_its_own_decision_carries_on_from_the_change(
    database_url: str,
) -> None:
    async with Store(database_url) as store, Store(database_url) as other:
        chat, (to_ann, to_bob) = await parked_on_transfers(store, ["Ann", "Bob"])
        await chat.approve(to_ann)  # the chat holds everything recorded
        assert await other.decline(to_bob.id, "Bob was paid") is True  # then another process changes the chat
        with statements_sent(store) as sent:
            reply = await chat.complete()
        assert reply is not None and reply.content == "All done."
        assert not chat.waiting, "the chat went on from what it held, missing the other process's decline"
        results = sorted(str(message.content) for message in chat.messages if message.role == "tool")
        assert results[0] == "Sent 1 to Ann" and "declined" in results[1]  # Bob's was declined
        stored = [message.content for message in await other.messages(chat.id)]
        assert sorted(map(str, stored[2:4])) == results and stored[4:] == ["All done."]
    if not database_url.startswith("sqlite"):  # there the chat reads its version first, in the same snapshot
        # The claim finds the chat changed (and the chat learns why); it reads what changed, and claims anew.
        assert sent[:3] == ["claim", "why not", "load"], "the claim did not find that the chat had changed"
        assert sent[3:] == ["claim", "claim"], "the chat did not claim both calls once it read what changed"


async def test_on_postgresql_a_chat_whose_own_decision_finds_it_changed_reads_it_at_once(postgres_url: str) -> None:
    async with Store(postgres_url) as store, Store(postgres_url) as other:
        chat, (to_ann, to_bob) = await parked_on_transfers(store, ["Ann", "Bob"])
        assert await other.approve(to_bob.id) is True  # another process changes the chat first
        with statements_sent(store) as sent:
            await chat.approve(to_ann)  # its versions show the chat changed in more than this decision
            reply = await chat.complete()
    assert reply is not None and reply.content == "All done."
    assert sent == ["decision", "load", "claim", "claim"], "the chat asked first, or claimed on a view it knew was old"


async def test_on_postgresql_every_claim_of_a_round_checks_the_chat_until_one_finds_it_current(
    postgres_url: str,
) -> None:
    async with Store(postgres_url) as store, Store(postgres_url) as other:
        chat, (to_ann, to_bob, to_cy) = await parked_on_transfers(store, ["Ann", "Bob", "Cy"], max_concurrency=1)
        await chat.approve(to_ann)
        await chat.approve(to_bob)
        assert await other.decline(to_cy.id) is True  # the chat changes after its own decisions
        with statements_sent(store) as sent:
            reply = await chat.complete()
    assert reply is not None and reply.content == "All done."
    stale = ["claim", "why not"]
    assert sent[:5] == [*stale, *stale, "load"], "a claim after a stale one went out without the chat's check"
    assert sent[5:] == ["claim"] * 3


async def test_on_postgresql_a_call_another_process_runs_is_found_busy_in_two_statements(
    postgres_url: str, tmp_path: Path
) -> None:
    ready, release = tmp_path / "ready", tmp_path / "release"
    calls = [{"name": "hang", "arguments": {"ready": str(ready), "release": str(release)}}]
    async with Store(postgres_url) as store, Store(postgres_url) as other:
        await store.setup()
        chat = await store.create_chat(reactive_model(calls), all_tools())
        running = asyncio.create_task(chat.ask("Hang on"))
        async with asyncio.timeout(10):
            while not ready.exists():
                await asyncio.sleep(0.01)
        elsewhere = await other.load_chat(chat.id, reactive_model(calls), all_tools())
        with statements_sent(other) as sent:
            await elsewhere.complete()
        assert sent == ["claim", "why not"], "the chat did not learn at once that another process holds the call"
        release.touch()
        reply = await running
    assert reply is not None and reply.content == "All done."
    assert [message.content for message in chat.messages if message.role == "tool"] == ["released"]


async def test_a_chat_another_process_carried_on_after_its_own_decision_runs_nothing_again(database_url: str) -> None:
    calls = [{"name": "transfer_money", "arguments": {"to": "Ann", "amount": 1}}]
    async with Store(database_url) as store, Store(database_url) as other:
        await store.setup()
        chat = await store.create_chat(reactive_model(calls), all_tools())
        await chat.ask("Pay Ann")
        (to_ann,) = await chat.pending_questions()
        await chat.approve(to_ann)
        elsewhere = await other.load_chat(chat.id, reactive_model(calls), all_tools())
        done = await elsewhere.complete()
        assert done is not None and done.content == "All done."
        reply = await chat.complete()  # its claim finds the call closed: it reads what the other process did
        assert reply is not None and reply.content == "All done."
        assert [message.content for message in chat.messages[2:]] == ["Sent 1 to Ann", "All done."]
        assert [message.content for message in await other.messages(chat.id)][2:] == ["Sent 1 to Ann", "All done."]


async def chat_version_from_rows(store: Store, chat_id: str) -> int:
    query = select(chats.c.version).where(chats.c.id == chat_id)
    return int(await store.db.run_read(lambda connection: connection.scalar(query)))


async def test_a_result_saved_after_another_process_took_the_call_over_writes_nothing(database_url: str) -> None:
    entered, release = threading.Event(), threading.Event()

    @tool
    def pay(amount: int) -> str:
        """Pays, slowly."""
        entered.set()
        release.wait(10)
        return "paid"

    script = [{"name": "pay", "arguments": {"amount": 5}}]
    async with Store(database_url, lease=60) as first:
        await first.setup()
        chat = await first.create_chat(reactive_model(script), [pay])
        asking = asyncio.create_task(chat.ask("Pay"))
        assert await asyncio.to_thread(entered.wait, 10)
        advance_clock(61)  # the first process's lease runs out while its tool runs
        async with Store(database_url, lease=60) as second:
            again = await second.load_chat(chat.id, reactive_model(script), [pay])
            await again.complete()  # closes the call as interrupted, and the model replies
            stored = await second.messages(chat.id)
            version = await second.chat_version(chat.id)
        release.set()
        await asking  # its result finds the call closed: nothing of it is written
        assert await first.messages(chat.id) == stored
        assert await first.chat_version(chat.id) == version
    assert "paid" not in [message.content for message in stored]
    assert [message.role for message in stored] == ["user", "assistant", "tool", "assistant"]


async def test_on_postgresql_a_chat_loads_in_one_statement_with_the_values_each_table_s_read_gives(
    postgres_url: str,
) -> None:
    class QuickApproval(TransferMoney):
        name = "transfer_money"
        approval_ttl = 60

    calls = [
        {"name": "transfer_money", "arguments": {"to": "Ann", "amount": 1}},
        {"name": "pick_colour", "arguments": {"wall": "north"}},
        {"name": "slow_job", "arguments": {"job": "backup"}},
    ]
    elsewhere = make_url(postgres_url)  # the server sends times in another zone: they still load as UTC
    options = f"{elsewhere.query['options']} -ctimezone=Asia/Kolkata"
    elsewhere_url = elsewhere.update_query_dict({"options": options}).render_as_string(hide_password=False)
    async with Store(elsewhere_url) as store:
        await store.setup()
        chat = await store.create_chat(reactive_model(calls), [QuickApproval(), PickColour(), SlowJob()])
        await chat.ask("Pay Ann, paint the north wall, back up")
        approval, colour = await chat.pending_questions()
        await chat.answer(colour, {"colour": "red"}, note="Bright")
        sent: list[str] = []

        def note(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            sent.append(statement)

        event.listen(store.db.sync_engine, "before_cursor_execute", note)
        loaded = await store.load_chat(chat.id, reactive_model(calls), [QuickApproval(), PickColour(), SlowJob()])
        event.remove(store.db.sync_engine, "before_cursor_execute", note)
        assert len(sent) == 1, "the chat and its rows were not read in one statement"
        assert [message.content for message in loaded.messages] == [message.content for message in chat.messages]
        (waiting,) = await loaded.pending_questions()
        assert waiting.id == approval.id and waiting.expires_at == approval.expires_at
        assert waiting.expires_at is not None and waiting.expires_at.utcoffset() == timedelta(0)

        def both(connection: Connection) -> tuple[Any, Any]:
            return fetch_chat(connection, chat.id, 0), fetch_tail(connection, chat.id, 0)

        (chat_row, at_once), one_by_one = await store.db.run_read(both)
        table_rows = await store.db.run_read(lambda c: c.execute(select(chats)).mappings().one())
    assert chat_row == dict(table_rows)
    assert at_once.messages == [dict(row) for row in one_by_one.messages]
    assert at_once.calls == [dict(row) for row in one_by_one.calls]
    assert at_once.questions == {key: [dict(row) for row in rows] for key, rows in one_by_one.questions.items()}
    assert [row["decision"] for rows in at_once.questions.values() for row in rows] == [None, "accept"]
    assert [row["state"] is not None for row in at_once.calls] == [False, True, True]


async def test_on_postgresql_an_answer_and_a_user_message_take_no_transaction(postgres_url: str) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        chat = await store.create_chat(reactive_model(PAY_AND_PAINT[:1]), all_tools())
        sent: list[str] = []
        began: list[bool] = []
        loop_thread, off_the_loop = threading.get_ident(), []

        def note(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            sent.append(statement.split(None, 2)[0] + " " + statement.split(None, 2)[1])
            if threading.get_ident() != loop_thread:
                off_the_loop.append(statement)
            assert cursor.connection.autocommit, "the statement commits by itself"

        def begin(conn: Any) -> None:
            began.append(conn.connection.driver_connection.autocommit)

        event.listen(store.db.sync_engine, "before_cursor_execute", note)
        event.listen(store.db.sync_engine, "begin", begin)
        await chat.ask("Pay Bob")
        assert sent == ["WITH asking", "WITH bumped", "SELECT tarry_grants.id,"], (
            "the user's message and the model's reply are one each, and one looks for standing grants of its approval"
        )
        assert began == [], "no transaction begins"
        assert off_the_loop == [], "each was sent from the event loop"
        (approval,) = await store.pending_questions(chat.id)
        announced: list[Question] = []
        store.decision_hooks.append(announced.append)
        del sent[:], began[:], off_the_loop[:]
        assert await store.approve(approval.id, by="ann") is True
        event.remove(store.db.sync_engine, "before_cursor_execute", note)
        event.remove(store.db.sync_engine, "begin", begin)
        assert sent == ["WITH decided"], "an approval by id is one statement: it needs no read of the question first"
        assert began == [], "the statement commits by itself"
        assert off_the_loop == [], "it was sent from the event loop, with no hop to a worker thread"
        (trail,) = await store.history(chat.id)
        assert (trail.outcome, trail.decision, trail.answer, trail.by, trail.channel) == (
            "decided",
            "accept",
            {},
            Principal("ann"),
            "code",
        )
        assert approval.tool_call is not None
        assert (trail.chat_id, trail.question_id, trail.kind, trail.message) == (
            chat.id,
            approval.id,
            "approval",
            approval.message,
        ), "the trail's row holds the question's own columns, read by the statement as it wrote"
        assert (trail.call_id, trail.tool, trail.arguments) == (
            approval.tool_call.id,
            "transfer_money",
            {"to": "Bob", "amount": 5},
        )
        decided = await store.question(approval.id)
        assert (decided.decision, decided.answer, decided.decided_by) == ("accept", {}, Principal("ann"))
        (told,) = announced
        assert told.id == approval.id and told.decision == "accept" and told.decided_by == Principal("ann")
        assert told.tool_call == approval.tool_call and told.chat_id == chat.id, "the hook got the question as decided"
        del sent[:]
        assert await store.approve(approval.id) is False, "decided already: the statement writes nothing"
        assert [event.outcome for event in await store.history(chat.id)] == ["decided", "lost"]


async def test_on_postgresql_an_approval_a_running_call_waits_on_is_declined_by_id_in_one_statement(
    postgres_url: str,
) -> None:
    class Wire(Tool):
        """Wires money, asking for an approval while it runs."""

        async def execute(self, amount: int) -> str:
            live = current_call.get()
            assert live is not None
            asked = await live.ask(Question("", "approval", f"Wire {amount}?"))
            return f"{asked.decision}: {asked.note}"

    calls = [{"name": "wire", "arguments": {"amount": 5}}]
    async with Store(postgres_url, poll_interval=0.01) as store:
        await store.setup()
        chat = await store.create_chat(reactive_model(calls), [Wire()])
        running = asyncio.create_task(chat.ask("Wire 5"))
        async with asyncio.timeout(10):
            while not (waiting := await store.pending_questions(chat.id)):
                await asyncio.sleep(0.01)
        (approval,) = waiting
        sent: list[str] = []

        def note(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            if statement.startswith("WITH decided") or "FOR UPDATE" in statement:  # not the running call's looks
                sent.append("locked read" if "FOR UPDATE" in statement else "decision")

        event.listen(store.db.sync_engine, "before_cursor_execute", note)
        assert await store.decline(approval.id, "not today") is True, "the call awaits it: it may be declined"
        event.remove(store.db.sync_engine, "before_cursor_execute", note)
        assert sent == ["decision"], "declined in one statement, though its call runs"
        assert (await running).content == "All done."
        assert chat.messages[-2].content == "decline: not today"
        assert [event.outcome for event in await store.history(chat.id)] == ["decided"]


async def waiting_for_a_lock(url: str, statement: str) -> None:
    """Returns once a statement starting with ``statement`` waits for a row lock on the server ``url`` names."""
    waits = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND starts_with(query, %s)"
    deadline = time.monotonic() + 10
    with psycopg.connect(url, autocommit=True) as watcher:
        while watcher.execute(waits, (statement,)).fetchone() != (1,):
            assert time.monotonic() < deadline, f"no {statement} statement waited for a lock"
            await asyncio.sleep(0.01)


async def test_on_postgresql_an_answer_that_finds_another_decision_holding_the_row_is_recorded_as_lost(
    postgres_url: str,
) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        chat = await store.create_chat(reactive_model(PAY_AND_PAINT[:1]), all_tools())
        await chat.ask("Pay Bob")
        (approval,) = await store.pending_questions(chat.id)
        plain = plain_url(postgres_url)
        with psycopg.connect(plain) as other:  # another process's decision, not committed yet
            other.execute(
                "UPDATE tarry_questions SET decision = 'decline', decided_at = now() WHERE id = %s", (approval.id,)
            )
            answering = asyncio.create_task(store.approve(approval.id))
            await waiting_for_a_lock(plain, "WITH decided")
            other.commit()
        assert await answering is False, "the answer was recorded over another decision"
        assert (await store.question(approval.id)).decision == "decline"
        assert [event.outcome for event in await store.history(chat.id)] == ["lost"]


@pytest.mark.parametrize(
    ("how", "cancellations"), [("by id", 1), ("by id", 3), ("through the chat", 1), ("through the chat", 3)]
)
async def test_on_postgresql_an_answer_cancelled_while_its_statement_runs_is_still_announced(
    postgres_url: str, how: str, cancellations: int
) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        announced: list[str] = []
        store.decision_hooks.append(lambda question: announced.append(question.id))
        chat = await store.create_chat(reactive_model(PAY_AND_PAINT[:1]), all_tools())
        await chat.ask("Pay Bob")
        (approval,) = await store.pending_questions(chat.id)
        plain = plain_url(postgres_url)
        with psycopg.connect(plain) as other:  # holds the chat's row: the decision's wake waits for it
            other.execute("UPDATE tarry_chats SET version = version WHERE id = %s", (chat.id,))
            decide = store.approve(approval.id) if how == "by id" else chat.approve(approval)
            answering = asyncio.create_task(decide)
            await waiting_for_a_lock(plain, "WITH decided")
            for _ in range(cancellations):  # cancelled again while it waits for the statement to end
                answering.cancel()
                await asyncio.sleep(0.05)
            assert not answering.done(), "it waits for the statement, which waits for the lock"
            other.rollback()
        with pytest.raises(asyncio.CancelledError):
            await answering
        assert (await store.question(approval.id)).decision == "accept", "the statement committed all the same"
        assert announced == [approval.id], "a decision the database recorded was not announced"
        assert [event.outcome for event in await store.history(chat.id)] == ["decided"]


async def test_on_postgresql_the_model_s_reply_with_its_calls_and_questions_is_one_statement(postgres_url: str) -> None:
    calls = [
        {"name": "transfer_money", "arguments": {"to": "Ann", "amount": 1}},
        {"name": "pick_colour", "arguments": {"wall": "north"}},
        {"name": "transfer_money", "arguments": {"to": "Bob", "amount": 2}},
    ]
    async with Store(postgres_url) as store:
        await store.setup()
        chat = await store.create_chat(reactive_model(calls), all_tools())
        sent: list[str] = []

        def note(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
            sent.append(statement)

        event.listen(store.db.sync_engine, "before_cursor_execute", note)
        await chat.ask("Pay Ann and Bob, and paint the north wall")
        event.remove(store.db.sync_engine, "before_cursor_execute", note)
    replies = [statement for statement in sent if statement.startswith("WITH bumped")]
    assert len(replies) == 1, "the reply, its three calls and their two approvals were not one statement"
    assert not [statement for statement in sent if statement.startswith("INSERT INTO tarry_tool_calls")]
    async with Store(postgres_url) as other:
        loaded = await other.load_chat(chat.id, reactive_model(calls), all_tools())
        assert [record.call.arguments for record in loaded.records.values()] == [call["arguments"] for call in calls]
        waiting = await other.pending_questions(chat.id)
        approvals = [question.tool_call for question in waiting if question.kind == "approval"]
        assert [call.arguments["to"] for call in approvals if call is not None] == ["Ann", "Bob"]
        assert [record.needs_approval for record in loaded.records.values()] == [True, False, True]
