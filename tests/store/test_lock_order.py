"""Row locks: the writes that may meet on one call take its rows in one order, and only a process that still holds
a call saves the questions its tool asks while it runs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import psycopg
import pytest
from sqlalchemy import event, text

from tarry import Chat, Task, Tool, tool
from tarry.errors import ClaimLostError
from tarry.live import current_call
from tarry.store import Store
from tarry.testing import ScriptedModel
from tarry.tools import ask
from tests.store.test_store import parked_on_transfers, plain_url

SLOW_CALL = [{"name": "slow", "arguments": {}}]


class SlowTool:
    """A tool that, once ``go`` is set, asks a question while it runs; what its ask came to is kept."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.go = asyncio.Event()
        self.asked: list[object] = []
        self.call_id = ""

        @tool
        async def slow() -> str:
            """Asks which colour, once let go."""
            self.call_id = current_call.get().call.id
            self.started.set()
            await self.go.wait()
            try:
                answered = await current_call.get().ask(ask("Which colour?", colour=str))
            except ClaimLostError as lost:
                self.asked.append(lost)
                raise
            self.asked.append(answered)
            return f"colour {answered.answer}"

        self.tool = slow

    async def running(self, store: Store) -> tuple[asyncio.Task[Chat], str]:
        """A new chat of ``store`` whose model calls this tool, running until ``go`` is set; and the chat's id."""
        await store.setup()
        started = asyncio.create_task(store.start_chat("Go", ScriptedModel([SLOW_CALL, "done"]), [self.tool]))
        await asyncio.wait_for(self.started.wait(), 10)
        (chat_id,) = [summary.id for summary in await store.list_chats()]
        return started, chat_id

    async def taken_over(self, store: Store, chat_id: str) -> None:
        """The call's lease runs out (its process stalled, say) and ``store`` takes it over: it closes the call as
        interrupted and the model replies."""
        await store.db.run_write(
            lambda connection: connection.execute(
                text("UPDATE tarry_tool_calls SET claimed_until = :past WHERE chat_id = :chat"),
                {"past": "2000-01-01 00:00:00+00:00", "chat": chat_id},
            )
        )
        taking_over = await store.load_chat(chat_id, ScriptedModel(["done"]), [self.tool])
        reply = await asyncio.wait_for(taking_over.complete(), 10)
        assert reply is not None and reply.content == "done"


async def until(condition: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_a_question_asked_after_another_process_took_the_call_over_is_not_saved(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    slow = SlowTool()
    async with Store(database_url) as first, Store(database_url) as second:
        started, chat_id = await slow.running(first)
        await slow.taken_over(second, chat_id)
        slow.go.set()
        await asyncio.wait_for(started, 10)  # before: the question was saved on the closed call, and waited forever
        assert len(slow.asked) == 1 and isinstance(slow.asked[0], ClaimLostError)
        assert await second.pending_questions(chat_id) == []
        results = [message.content for message in await second.messages(chat_id) if message.role == "tool"]
        assert len(results) == 1 and "interrupted" in str(results[0])
    # Not a crash of the tool: the process lost the call, and says so once.
    assert not [record for record in caplog.records if record.levelname == "ERROR"]
    assert [record.getMessage() for record in caplog.records if "Lost the claim" in record.getMessage()] == [
        f"Lost the claim on the slow call {slow.call_id} while it ran; another process carries it on"
    ]


def blocked_behind(
    holder: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], watcher: psycopg.Connection[Any]
) -> int:
    """How many sessions wait, directly or through others, on a lock ``holder``'s session holds."""
    query = """
        WITH RECURSIVE blocked(pid) AS (
            SELECT pid FROM pg_stat_activity WHERE %(holder)s = ANY(pg_blocking_pids(pid))
            UNION
            SELECT activity.pid FROM pg_stat_activity activity
            JOIN blocked ON blocked.pid = ANY(pg_blocking_pids(activity.pid))
        )
        SELECT count(*) FROM blocked
    """
    row = watcher.execute(query, {"holder": holder.info.backend_pid}).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_live_question_and_the_takeover_that_closes_its_call_do_not_deadlock(postgres_url: str) -> None:
    """Process A's tool asks a question as its lapsed call is taken over by B, which closes it as interrupted.

    A session that holds the chat's row lines the two up: A's question waits for the chat's row, then B's
    close does. Before, A held the chat's row when its question's foreign-key check needed the call's row,
    which B's close held while it waited for the chat's: PostgreSQL found a deadlock and ended one of them.
    """
    slow = SlowTool()
    async with Store(postgres_url) as first, Store(postgres_url) as second:
        started, chat_id = await slow.running(first)
        with (
            psycopg.connect(plain_url(postgres_url)) as holder,
            psycopg.connect(plain_url(postgres_url), autocommit=True) as watcher,
        ):
            holder.execute(
                "UPDATE tarry_tool_calls SET claimed_until = now() - interval '1 hour' WHERE chat_id = %s", (chat_id,)
            )
            holder.commit()
            holder.execute("SELECT 1 FROM tarry_chats WHERE id = %s FOR NO KEY UPDATE", (chat_id,))
            slow.go.set()
            await until(lambda: blocked_behind(holder, watcher) >= 1, "the question to wait for the chat's row")
            taking_over = await second.load_chat(chat_id, ScriptedModel(["done"]), [slow.tool])
            closing = asyncio.create_task(taking_over.complete())
            await until(lambda: blocked_behind(holder, watcher) >= 2, "the takeover to wait behind it")
            holder.commit()
            reply = await asyncio.wait_for(closing, 10)  # before: one of the two ended with "deadlock detected"
            asked = "SELECT count(*) FROM tarry_questions WHERE chat_id = %s AND message = 'Which colour?'"
            (saved,) = watcher.execute(asked, (chat_id,)).fetchone() or (0,)
        assert reply is not None and reply.content == "done"
        results = [message.content for message in await second.messages(chat_id) if message.role == "tool"]
        assert len(results) == 1 and "interrupted" in str(results[0])
        # A still held the call when it asked, so its question is saved; once B closed the call, no answer can
        # come, and the tool's ask() says so instead of waiting for ever.
        await asyncio.wait_for(started, 10)
        assert saved == 1 and len(slow.asked) == 1 and isinstance(slow.asked[0], ClaimLostError)


async def test_a_tool_waiting_for_an_answer_hears_that_another_process_took_its_call_over(database_url: str) -> None:
    slow = SlowTool()
    async with Store(database_url, poll_interval=0.05) as first, Store(database_url) as second:
        started, chat_id = await slow.running(first)
        slow.go.set()
        deadline = time.monotonic() + 10
        while not await second.pending_questions(chat_id):
            assert time.monotonic() < deadline, "the tool's question was never saved"
            await asyncio.sleep(0.02)
        await slow.taken_over(second, chat_id)
        await asyncio.wait_for(started, 10)  # before: the tool waited for an answer that could not come
        assert len(slow.asked) == 1 and isinstance(slow.asked[0], ClaimLostError)


async def lapse(store: Store) -> None:
    """Every call's lease runs out (its process stalled, say)."""
    await store.db.run_write(
        lambda connection: connection.execute(
            text("UPDATE tarry_tool_calls SET claimed_until = :past"), {"past": "2000-01-01 00:00:00+00:00"}
        )
    )


async def lapse_and_take_over(store: Store, chat_id: str, tools: list[Any]) -> asyncio.Task[Any]:
    """The chat's calls' leases run out; ``store`` carries the chat on."""
    await lapse(store)
    taking_over = await store.load_chat(chat_id, ScriptedModel(["done"]), tools)
    return asyncio.create_task(taking_over.complete())


async def one_new_question(store: Store, known: set[str]) -> Any:
    """The one undecided question of ``store`` whose id is not in ``known``, once there is one."""
    deadline = time.monotonic() + 10
    while True:
        new = [question for question in await store.pending_questions() if question.id not in known]
        if new:
            (question,) = new
            return question
        assert time.monotonic() < deadline, "no new question was asked"
        await asyncio.sleep(0.02)


@asynccontextmanager
async def three_stores(url: str) -> AsyncIterator[tuple[Store, Store, Store]]:
    """Three stores on one set-up database, as three processes have, each looking at a question every 20 ms."""
    async with (
        Store(url, poll_interval=0.02) as first,
        Store(url, poll_interval=0.02) as second,
        Store(url, poll_interval=0.02) as third,
    ):
        await first.setup()
        yield first, second, third


class Seats:
    """An idempotent tool that asks how many seats while it runs; what each run's ask came to is kept."""

    def __init__(self) -> None:
        self.runs = 0
        self.outcomes: list[object] = []

        @tool(idempotent=True)
        async def book() -> str:
            """Books seats, asking how many."""
            self.runs += 1
            live = current_call.get()
            assert live is not None
            try:
                answered = await live.ask(ask("How many seats?", seats=int))
            except ClaimLostError as lost:
                self.outcomes.append(lost)
                raise
            self.outcomes.append(answered.answer)
            return f"booked {answered.answer}"

        self.tool = book


async def test_a_stalled_process_and_the_one_that_took_its_call_over_do_not_both_act_on_the_answer(
    database_url: str,
) -> None:
    """A process whose lease ran out unnoticed still waits for the answer to its tool's question when another
    takes the call over and runs the tool again, which asks the same question: the one answer reaches the new
    run only, and the stalled tool hears that the call is no longer its own."""
    seats = Seats()
    calls = ScriptedModel([[{"name": "book", "arguments": {}}], "done"])
    async with Store(database_url, poll_interval=0.05) as first, Store(database_url, poll_interval=0.05) as second:
        await first.setup()
        stalled = asyncio.create_task(first.start_chat("Book", calls, [seats.tool]))
        question = await one_new_question(second, set())
        assert question.chat_id is not None
        carrying = await lapse_and_take_over(second, question.chat_id, [seats.tool])
        await until(lambda: seats.runs == 2, "the tool to run again")
        assert await second.answer(question.id, 2)
        reply = await asyncio.wait_for(carrying, 10)
        await asyncio.wait_for(stalled, 10)
        assert reply is not None and reply.content == "done"
        assert await second.pending_questions() == []
        results = [message.content for message in await second.messages(question.chat_id) if message.role == "tool"]
        assert results == ["booked {'seats': 2}"]
    # Before, both runs got the answer, and the tool's work went on twice at once.
    assert seats.outcomes.count({"seats": 2}) == 1, seats.outcomes
    assert len(seats.outcomes) == 2 and any(isinstance(outcome, ClaimLostError) for outcome in seats.outcomes)


async def test_a_run_taken_over_twice_repeats_what_both_earlier_runs_asked(database_url: str) -> None:
    """The second run got the first question's answer and asked a second question; the third run, after another
    takeover, gets both answers without a person asking anything again."""
    outcomes: list[object] = []

    @tool(idempotent=True)
    async def book() -> str:
        """Books seats, asking how many, then when."""
        live = current_call.get()
        assert live is not None
        try:
            seats = await live.ask(ask("How many seats?", seats=int))
            when = await live.ask(ask("Which time?", time=str))
        except ClaimLostError as lost:
            outcomes.append(lost)
            raise
        outcomes.append((seats.answer, when.answer))
        return f"booked {seats.answer} at {when.answer}"

    model = ScriptedModel([[{"name": "book", "arguments": {}}], "done"])
    async with three_stores(database_url) as (first, second, third):
        runs = [asyncio.create_task(first.start_chat("Book", model, [book]))]
        seats = await one_new_question(third, set())
        assert seats.chat_id is not None
        runs.append(await lapse_and_take_over(second, seats.chat_id, [book]))
        await until(lambda: sum(isinstance(outcome, ClaimLostError) for outcome in outcomes) == 1, "a lost run")
        assert await third.answer(seats.id, 2)
        when = await one_new_question(third, {seats.id})
        runs.append(await lapse_and_take_over(third, seats.chat_id, [book]))
        await until(lambda: sum(isinstance(outcome, ClaimLostError) for outcome in outcomes) == 2, "two lost runs")
        assert await third.answer(when.id, time="19:00")
        reply = await asyncio.wait_for(runs[-1], 10)
        await asyncio.wait_for(asyncio.gather(*runs[:-1]), 10)
        assert reply is not None and reply.content == "done"
        results = [message.content for message in await third.messages(seats.chat_id) if message.role == "tool"]
        assert results == ["booked {'seats': 2} at {'time': '19:00'}"]
        assert await third.pending_questions() == []  # before: the third run asked the first question again
    assert outcomes[-1] == ({"seats": 2}, {"time": "19:00"})


async def test_a_run_taken_over_that_asks_something_else_closes_what_the_earlier_run_asked(database_url: str) -> None:
    """The first run asked how many seats; the run that took the call over asks which time instead. The seats
    question, which nothing will read, leaves the inbox: cancelled through the code channel, on the trail."""
    runs: list[str] = []

    @tool(idempotent=True)
    async def book() -> str:
        """Books seats, asking how many; run again, it asks which time."""
        live = current_call.get()
        assert live is not None
        runs.append("run")
        question = ask("How many seats?", seats=int) if len(runs) == 1 else ask("Which time?", time=str)
        return f"booked {(await live.ask(question)).answer}"

    model = ScriptedModel([[{"name": "book", "arguments": {}}], "done"])
    async with Store(database_url, poll_interval=0.02) as first, Store(database_url, poll_interval=0.02) as second:
        await first.setup()
        stalled = asyncio.create_task(first.start_chat("Book", model, [book]))
        seats = await one_new_question(second, set())
        assert seats.chat_id is not None
        carrying = await lapse_and_take_over(second, seats.chat_id, [book])
        when = await one_new_question(second, {seats.id})
        assert [question.id for question in await second.pending_questions()] == [when.id]  # before: both listed
        closed = await second.question(seats.id)
        assert (closed.decision, closed.channel, closed.decided_by) == ("cancel", "code", None)
        assert [(event.outcome, event.decision, event.channel) for event in await second.history(None, seats.id)] == [
            ("decided", "cancel", "code")
        ]
        assert await second.answer(when.id, time="19:00")
        reply = await asyncio.wait_for(carrying, 10)
        await asyncio.wait_for(stalled, 10)
        assert reply is not None and reply.content == "done"
        results = [message.content for message in await second.messages(seats.chat_id) if message.role == "tool"]
        assert results == ["booked {'time': '19:00'}"]


async def test_a_stalled_run_that_asks_something_else_does_not_close_what_the_run_holding_the_call_waits_on(
    database_url: str,
) -> None:
    """The first run asked how many seats, then which time, and died. The second took the call over, got the seats
    again and stalled; the third took it over and waits for the time. The second then asks which day instead:
    it no longer holds the call, so it closes nothing (before, it cancelled the time the third run waits on)."""
    stall, asking = asyncio.Event(), []

    @tool(idempotent=True)
    async def book() -> str:
        """Books seats, asking how many and which time (the second run asks which day)."""
        live = current_call.get()
        assert live is not None
        run = len(asking) + 1
        asking.append([run])
        seats = await live.ask(ask("How many seats?", seats=int))
        if run == 2:
            await stall.wait()
        asking[run - 1].append("second")
        second = await live.ask(ask("Which day?", day=str) if run == 2 else ask("Which time?", time=str))
        return f"booked {seats.answer} {second.answer}"

    model = ScriptedModel([[{"name": "book", "arguments": {}}], "done"])
    async with three_stores(database_url) as (first, second, third):
        runs = [asyncio.create_task(first.start_chat("Book", model, [book]))]
        seats = await one_new_question(third, set())
        assert seats.chat_id is not None and await third.answer(seats.id, 2)
        when = await one_new_question(third, set())
        runs.append(await lapse_and_take_over(second, seats.chat_id, [book]))
        await until(lambda: len(asking) == 2, "the second run")
        runs.append(await lapse_and_take_over(third, seats.chat_id, [book]))
        await until(lambda: len(asking) == 3 and asking[2] == [3, "second"], "the third run to ask which time")
        stall.set()
        await asyncio.wait_for(runs[1], 10)  # the second run lost the call when it asked which day
        assert [question.id for question in await third.pending_questions()] == [when.id], "which time was closed"
        assert await third.answer(when.id, time="19:00")
        reply = await asyncio.wait_for(runs[2], 10)
        await asyncio.wait_for(runs[0], 10)
        assert reply is not None and reply.content == "done"
        results = [message.content for message in await third.messages(seats.chat_id) if message.role == "tool"]
        assert results == ["booked {'seats': 2} {'time': '19:00'}"]


async def test_a_run_taken_over_that_pauses_before_asking_again_closes_what_it_did_not_ask(database_url: str) -> None:
    """The first run asked how many seats, then which time, and died. The run that took the call over got the
    seats again and then waits on a job instead of asking the time: the time question leaves the inbox."""
    runs: list[int] = []

    class Book(Tool):
        """Books seats, asking how many and which time; run again, it waits on a job after the seats."""

        idempotent = True

        async def execute(self) -> str | Task:
            live = current_call.get()
            assert live is not None
            runs.append(len(runs) + 1)
            seats = await live.ask(ask("How many seats?", seats=int))
            if len(runs) > 1:
                return Task(status_message="booking", poll_interval=60)
            return f"booked {seats.answer} {(await live.ask(ask('Which time?', time=str))).answer}"

        async def resume(self, task: Task) -> str:
            return "booked later"

    model = ScriptedModel([[{"name": "book", "arguments": {}}], "done"])
    async with Store(database_url, poll_interval=0.02) as first, Store(database_url, poll_interval=0.02) as second:
        await first.setup()
        stalled = asyncio.create_task(first.start_chat("Book", model, [Book()]))
        seats = await one_new_question(second, set())
        assert seats.chat_id is not None and await second.answer(seats.id, 2)
        when = await one_new_question(second, set())
        await asyncio.wait_for(await lapse_and_take_over(second, seats.chat_id, [Book()]), 10)
        assert runs == [1, 2]
        assert await second.pending_questions() == [], "before: which time stayed listed beside the waiting job"
        assert (await second.question(when.id)).decision == "cancel"
        assert [task.status_message for task in await second.pending_tasks()] == ["booking"]
        await asyncio.wait_for(stalled, 10)  # its run heard that the call is no longer its own


async def test_an_answer_that_finds_the_lease_run_out_is_taken_only_with_the_lease_renewed(database_url: str) -> None:
    """The tool's process stalled past its lease, and nobody took the call over yet, when the answer came: the
    process renews its lease before it goes on, so a process looking at the chat then finds the call held and
    does not run the tool again."""
    answered, finish = asyncio.Event(), asyncio.Event()
    runs: list[object] = []

    @tool(idempotent=True)
    async def book() -> str:
        """Books seats, asking how many."""
        live = current_call.get()
        assert live is not None
        seats = (await live.ask(ask("How many seats?", seats=int))).answer
        runs.append(seats)
        answered.set()
        await finish.wait()
        return f"booked {seats}"

    model = ScriptedModel([[{"name": "book", "arguments": {}}], "done"])
    async with Store(database_url, poll_interval=0.02) as first, Store(database_url) as second:
        await first.setup()
        running = asyncio.create_task(first.start_chat("Book", model, [book]))
        question = await one_new_question(second, set())
        assert question.chat_id is not None
        await lapse(second)
        assert await second.answer(question.id, 2)
        await asyncio.wait_for(answered.wait(), 10)
        looking = await second.load_chat(question.chat_id, ScriptedModel(["done"]), [book])
        await asyncio.wait_for(looking.complete(), 10)  # before: the lease stayed run out, and this ran the tool
        assert looking.waiting and runs == [{"seats": 2}]
        finish.set()
        chat = await asyncio.wait_for(running, 10)
        assert chat.last_reply is not None and chat.last_reply.content == "done" and runs == [{"seats": 2}]


class GoAheadTwice(Tool):
    """Asks to go ahead while it runs, then waits on a job; asks again when it checks the job (safe to run
    again). What each ask came to is kept."""

    idempotent = True
    asked: ClassVar[list[tuple[str, object]]] = []

    async def execute(self) -> Task:
        self.asked.append(("execute", await self._go_ahead()))
        return Task(status_message="queued", poll_interval=0.01)

    async def resume(self, task: Task) -> str:
        self.asked.append(("resume", await self._go_ahead()))
        return "checked"

    async def _go_ahead(self) -> object:
        live = current_call.get()
        assert live is not None
        return (await live.ask(ask("Go ahead?", ok=bool))).answer


async def test_a_check_run_again_after_a_takeover_does_not_take_the_answer_the_first_run_got(
    database_url: str,
) -> None:
    """The tool asked "Go ahead?" as it started its job, and asks it again when it checks on it. A check cut
    short and run again by another process is not a repeat of the start: its question goes to a person."""
    GoAheadTwice.asked = []
    model = ScriptedModel([[{"name": "go_ahead_twice", "arguments": {}}], "done"])
    async with Store(database_url, poll_interval=0.02) as first, Store(database_url, poll_interval=0.02) as second:
        await first.setup()
        starting = asyncio.create_task(first.start_chat("Go", model, [GoAheadTwice()]))
        started = await one_new_question(second, set())
        assert await second.answer(started.id, ok=True)
        chat = await asyncio.wait_for(starting, 10)
        checking = asyncio.create_task(chat.complete())
        checked = await one_new_question(second, {started.id})
        carrying = await lapse_and_take_over(second, chat.id, [GoAheadTwice()])
        again = await one_new_question(second, {started.id, checked.id})  # before: it took the start's answer
        assert GoAheadTwice.asked == [("execute", {"ok": True})]
        assert [question.id for question in await second.pending_questions()] == [again.id], "the check's went"
        assert (await second.question(checked.id)).decision == "cancel"
        assert await second.answer(again.id, ok=False)
        reply = await asyncio.wait_for(carrying, 10)
        await asyncio.wait_for(checking, 10)
        assert reply is not None and reply.content == "done"
    assert GoAheadTwice.asked[-1] == ("resume", {"ok": False})


async def test_on_postgresql_every_row_lock_tarry_takes_lets_foreign_key_checks_through(postgres_url: str) -> None:
    """tarry never changes a row's key, so it locks rows FOR NO KEY UPDATE: an insert's foreign-key check (FOR KEY
    SHARE on the row it refers to) never waits for such a lock, so never closes a cycle of waits with it."""
    sent: list[str] = []
    async with Store(postgres_url) as store:
        event.listen(store.db.sync_engine, "before_cursor_execute", lambda _c, _k, sql, *_: sent.append(sql))
        chat, (to_ann,) = await parked_on_transfers(store, ["Ann"])
        assert await store.approve(to_ann.id) is True
        assert await store.approve(to_ann.id) is False  # decided already: the row lock, to put "lost" on the trail
        reply = await chat.complete()  # the call's claim, its result under the lock of the held call, the reply
        assert reply is not None and reply.content == "All done."
        assert await store.cancel(chat.id) is True  # under the chat's row lock
    locks = [" ".join(sql.split()).rsplit(" FOR ", 1)[1] for sql in sent if " FOR " in " ".join(sql.split())]
    taken = [lock for lock in locks if "UPDATE" in lock or "SHARE" in lock]
    assert len(taken) >= 3 and all(lock.startswith("NO KEY UPDATE") for lock in taken), taken


async def test_on_postgresql_a_result_whose_save_the_database_ends_to_break_a_deadlock_is_saved_again(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Another session holds the chat's row, the tool's result save holds the call's and waits for it, then that
    session asks for the call's row: PostgreSQL ends the save, the first to wait, with "deadlock detected". The
    save saved nothing, and the tool has run: tarry saves the result again once the other session is done."""
    runs: list[str] = []
    started, go = asyncio.Event(), asyncio.Event()

    @tool
    async def paint(wall: str) -> str:
        """Paints a wall, once let go."""
        started.set()
        await go.wait()
        runs.append(wall)
        return f"painted {wall}"

    async with Store(postgres_url) as store:
        await store.setup()
        chat = await store.create_chat(
            ScriptedModel([[{"name": "paint", "arguments": {"wall": "north"}}], "done"]), [paint]
        )
        asking = asyncio.create_task(chat.ask("Paint the north wall"))
        await asyncio.wait_for(started.wait(), 10)
        async with await psycopg.AsyncConnection.connect(plain_url(postgres_url)) as other:
            await other.execute("SELECT 1 FROM tarry_chats WHERE id = %s FOR NO KEY UPDATE", (chat.id,))
            go.set()
            with psycopg.connect(plain_url(postgres_url), autocommit=True) as watcher:
                await until(lambda: blocked_behind(other, watcher) >= 1, "the result's save to wait for the chat")
            # Waits for the call's row, which the save holds, until PostgreSQL ends the save.
            await other.execute("SELECT 1 FROM tarry_tool_calls WHERE chat_id = %s FOR NO KEY UPDATE", (chat.id,))
            await other.rollback()
        reply = await asyncio.wait_for(asking, 30)  # before: "deadlock detected" from ask(), the result lost
    assert reply is not None and reply.content == "done" and runs == ["north"]
    assert [message.content for message in chat.messages if message.role == "tool"] == ["painted north"]
    assert "met another transaction; trying again" in caplog.text
