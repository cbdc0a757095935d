"""PostgreSQL: approvals and declines by id that arrive while one is on its way are recorded in one statement."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from sqlalchemy import event, update

from tarry import Chat, Principal, Question
from tarry.errors import QuestionExpiredError
from tarry.store import Store
from tarry.store.tables import questions
from tarry.store.together import MOST_TOGETHER
from tarry.tools import Tool
from tests.store.test_accountable import check_trail
from tests.store.test_processes import finish, marker_lines
from tests.store.test_store import plain_url, waiting_for_a_lock
from tests.store.tools import TransferMoney, reactive_model

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


@contextmanager
def decisions_sent(store: Store) -> Iterator[list[int]]:
    """How many questions each decision statement ``store`` sends in the block names: 1 for one sent alone."""
    sent: list[int] = []

    def note(conn: Any, cursor: Any, statement: str, parameters: Any, *rest: Any) -> None:
        if statement.startswith("WITH decided"):
            sent.append(len(parameters["given_question"]) if "given_question" in parameters else 1)

    event.listen(store.db.sync_engine, "before_cursor_execute", note)
    try:
        yield sent
    finally:
        event.remove(store.db.sync_engine, "before_cursor_execute", note)


async def parked(store: Store, count: int, tool: Tool | None = None) -> list[tuple[Chat, Question]]:
    """``count`` chats, each waiting on the approval of one transfer, with their approvals."""
    found = []
    for number in range(count):
        calls = [{"name": "transfer_money", "arguments": {"to": f"p{number}", "amount": number}}]
        chat = await store.create_chat(reactive_model(calls), [tool or TransferMoney()])
        await chat.ask(f"Pay p{number}")
        (approval,) = await store.pending_questions(chat.id)
        found.append((chat, approval))
    return found


async def test_approvals_that_arrive_together_are_recorded_in_one_statement_each_with_its_own_decider(
    postgres_url: str,
) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        waiting = await parked(store, 10)
        versions = [await store.chat_version(chat.id) for chat, _ in waiting]
        announced: list[Question] = []
        store.decision_hooks.append(announced.append)
        with decisions_sent(store) as sent:
            recorded = await asyncio.gather(
                *(store.approve(approval.id, by=f"person{n}", channel="web") for n, (_, approval) in enumerate(waiting))
            )
        assert recorded == [True] * 10
        assert sent == [10], "asked on one turn of the event loop, sent in one statement"
        for number, (chat, approval) in enumerate(waiting):
            decided = await store.question(approval.id)
            assert (decided.decision, decided.answer, decided.decided_by, decided.channel) == (
                "accept",
                {},
                Principal(f"person{number}"),
                "web",
            )
            (trail,) = await store.history(question_id=approval.id)
            assert (trail.outcome, trail.decision, trail.by, trail.channel, trail.answer, trail.note) == (
                "decided",
                "accept",
                Principal(f"person{number}"),
                "web",
                {},
                None,
            )
            assert (trail.chat_id, trail.tool, trail.arguments) == (
                chat.id,
                "transfer_money",
                {"to": f"p{number}", "amount": number},
            )
            assert await store.chat_version(chat.id) == versions[number] + 1, "the decision woke the chat"
        await check_trail(store)
        assert sorted((q.id, q.decided_by) for q in announced) == sorted(
            (approval.id, Principal(f"person{n}")) for n, (_, approval) in enumerate(waiting)
        ), "each hook call got its own question as decided"
        for chat, _ in waiting:
            assert (await chat.complete()).content == "All done."


async def test_declines_together_each_keep_their_own_note(postgres_url: str) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        waiting = await parked(store, 4)
        with decisions_sent(store) as sent:
            recorded = await asyncio.gather(
                *(store.decline(approval.id, f"not {n}", by="ann") for n, (_, approval) in enumerate(waiting))
            )
        assert recorded == [True] * 4 and sent == [4]
        for number, (chat, approval) in enumerate(waiting):
            assert (await store.question(approval.id)).note == f"not {number}"
            (trail,) = await store.history(question_id=approval.id)
            assert (trail.decision, trail.answer, trail.note, trail.by) == (
                "decline",
                None,
                f"not {number}",
                Principal("ann"),
            )
            await chat.complete()
            assert chat.messages[-2].content is not None and f"not {number}" in chat.messages[-2].content


async def test_two_approvals_of_one_chat_together_wake_it_once_and_it_carries_both_calls_on(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(markers))
    calls = [{"name": "transfer_money", "arguments": {"to": to, "amount": 1}} for to in ("Ann", "Bob", "Cy")]
    async with Store(postgres_url) as store:
        await store.setup()
        chat = await store.create_chat(reactive_model(calls), [TransferMoney()])
        await chat.ask("Pay Ann, Bob and Cy")
        first, *others = await store.pending_questions(chat.id)
        version = await store.chat_version(chat.id)
        with decisions_sent(store) as sent:
            assert await asyncio.gather(*(store.approve(q.id) for q in (first, *others))) == [True] * 3
        assert sent == [3]
        assert await store.chat_version(chat.id) == version + 1, "the chat was woken once"
        assert (await chat.complete()).content == "All done."
    assert sorted(marker_lines(markers, "transfer")) == ["Ann:1", "Bob:1", "Cy:1"]


async def test_the_same_question_twice_at_once_is_recorded_once_and_the_other_attempt_is_lost(
    postgres_url: str,
) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        (_, first), (_, second) = await parked(store, 2)
        with decisions_sent(store) as sent:
            recorded = await asyncio.gather(
                store.approve(first.id, by="ann"),
                store.approve(second.id, by="ann"),
                store.approve(second.id, by="bob"),
            )
        assert recorded == [True, True, False]
        assert sent == [2, 1], "a question named twice waits for the next statement, not the same one"
        assert (await store.question(second.id)).decided_by == Principal("ann")
        assert [(e.outcome, e.by) for e in await store.history(question_id=second.id)] == [
            ("decided", Principal("ann")),
            ("lost", Principal("bob")),
        ]


async def test_those_the_statement_cannot_decide_go_the_locked_way_and_the_others_are_recorded(
    postgres_url: str,
) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        (_, first), (_, decided), (_, lapsed), (_, fresh) = await parked(store, 4)
        assert await store.approve(decided.id, by="earlier")
        past = (await store.question(lapsed.id)).asked_at - timedelta(seconds=1)
        await store.db.run_write(
            lambda connection: connection.execute(
                update(questions).where(questions.c.id == lapsed.id).values(expires_at=past)
            )
        )
        with decisions_sent(store) as sent:
            outcomes = await asyncio.gather(
                *(store.approve(q.id, by="ann") for q in (first, decided, lapsed, fresh)), return_exceptions=True
            )
        assert sent == [4]
        assert outcomes[0] is True and outcomes[1] is False and outcomes[3] is True
        assert isinstance(outcomes[2], QuestionExpiredError)
        assert [e.outcome for e in await store.history(question_id=decided.id)] == ["decided", "lost"]
        assert [e.outcome for e in await store.history(question_id=lapsed.id)] == ["expired"]
        assert (await store.question(fresh.id)).decided_by == Principal("ann")


async def test_a_statement_takes_at_most_its_share_and_the_rest_go_in_the_next(postgres_url: str) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        ids = [approval.id for _, approval in await parked(store, MOST_TOGETHER + 6)]
        with decisions_sent(store) as sent:
            assert await asyncio.gather(*(store.approve(question_id) for question_id in ids)) == [True] * len(ids)
        assert sent == [MOST_TOGETHER, 6]


async def test_a_statement_the_database_refuses_is_sent_again_one_by_one_and_only_the_refused_attempt_fails(
    postgres_url: str,
) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        (_, first), (_, second), (_, third) = await parked(store, 3)
        plain = plain_url(postgres_url)
        with psycopg.connect(plain, autocommit=True) as admin:  # the database refuses any trail row for the third
            admin.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF NEW.question_id = TG_ARGV[0] THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$"
            )
            admin.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON tarry_decision_events "
                f"FOR EACH ROW EXECUTE FUNCTION refuse('{third.id}')"
            )
        with decisions_sent(store) as sent:
            outcomes = await asyncio.gather(
                *(store.approve(q.id, by="ann") for q in (first, second, third)), return_exceptions=True
            )
        assert sent == [3, 1, 1, 1], "the statement of three saved nothing; each went again alone"
        assert outcomes[:2] == [True, True]
        assert "refused by the test" in str(outcomes[2])
        assert (await store.question(third.id)).decision is None
        assert sorted(e.question_id for e in await store.history()) == sorted([first.id, second.id])
        await check_trail(store)


async def test_a_decline_note_no_database_can_hold_fails_only_its_own_decline(database_url: str) -> None:
    async with Store(database_url) as store:
        await store.setup()
        (chat, first), (_, second) = await parked(store, 2)
        outcomes = await asyncio.gather(
            store.decline(first.id, "no\x00pe"), store.decline(second.id, "not now"), return_exceptions=True
        )
        assert isinstance(outcomes[0], ValueError) and "NUL" in str(outcomes[0]), outcomes
        assert outcomes[1] is True
        with pytest.raises(ValueError, match="NUL"):
            await chat.decline(first, "no\x00pe")
        assert (await store.question(first.id)).decision is None and await store.history(question_id=first.id) == []
        assert (await store.question(second.id)).note == "not now"


async def test_a_caller_cancelled_while_its_statement_runs_still_has_its_decision_announced(
    postgres_url: str,
) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        announced: list[str] = []
        store.decision_hooks.append(lambda question: announced.append(question.id))
        (first_chat, first), (second_chat, second), (_, third) = await parked(store, 3)
        plain = plain_url(postgres_url)
        with psycopg.connect(plain) as holds_first, psycopg.connect(plain) as holds_second:
            for holder, chat in ((holds_first, first_chat), (holds_second, second_chat)):
                holder.execute("UPDATE tarry_chats SET version = version WHERE id = %s", (chat.id,))
            alone = asyncio.create_task(store.approve(first.id))
            await waiting_for_a_lock(plain, "WITH decided")
            together = [asyncio.create_task(store.approve(q.id)) for q in (second, third)]
            await asyncio.sleep(0)
            holds_first.rollback()
            assert await alone is True
            await waiting_for_a_lock(plain, "WITH decided")  # the two together wait for the second chat's row
            together[1].cancel()
            holds_second.rollback()
        assert await together[0] is True
        with pytest.raises(asyncio.CancelledError):
            await together[1]
        assert (await store.question(third.id)).decision == "accept", "the statement committed all the same"
        assert sorted(announced) == sorted([first.id, second.id, third.id])


async def test_approvers_in_three_processes_each_approving_everything_at_once_record_each_decision_once(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    markers = tmp_path / "markers"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(markers))
    async with Store(postgres_url) as store:
        await store.setup()
        waiting = await parked(store, 30)
        ids_file, start_file = tmp_path / "ids.json", tmp_path / "go"
        ids_file.write_text(json.dumps([approval.id for _, approval in waiting]))
        processes = [approver(postgres_url, ids_file, start_file, who) for who in ("ann", "bob", "cy")]
        start_file.touch()
        results = [json.loads(finish(process)) for process in processes]
        for _, approval in waiting:
            outcomes = sorted(result[approval.id] for result in results)
            assert outcomes == ["lost", "lost", "recorded"], (approval.id, outcomes)
            decided = await store.question(approval.id)
            winner = next(
                who
                for who, result in zip(("ann", "bob", "cy"), results, strict=True)
                if result[approval.id] == "recorded"
            )
            assert decided.decided_by == Principal(winner)
        await check_trail(store)
        for chat, _ in waiting:
            await chat.complete()
    assert sorted(marker_lines(markers, "transfer")) == sorted(f"p{n}:{n}" for n in range(30)), "each ran once"


def approver(url: str, ids_file: Path, start_file: Path, who: str) -> subprocess.Popen[str]:
    """A process that approves every question in ``ids_file`` as ``who``, all at once, once ``start_file`` appears."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    command = [sys.executable, "-m", "tests.store.approvers", url, str(ids_file), str(start_file), who, "at-once"]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


async def test_decisions_whose_sender_is_cancelled_before_it_starts_end_and_the_next_are_sent(
    postgres_url: str,
) -> None:
    async with Store(postgres_url) as store:
        await store.setup()
        ids = [approval.id for _, approval in await parked(store, 3)]

        async def cancel_everything_then_approve() -> tuple[list[object], bool]:
            async with Store(postgres_url) as other:
                approvals = [asyncio.ensure_future(other.approve(question_id)) for question_id in ids]
                await asyncio.sleep(0)  # each approval now waits for the task that will send them, not started yet
                for task in asyncio.all_tasks():  # as a shutdown that cancels every task does
                    if task is not asyncio.current_task():
                        task.cancel()
                outcomes = await asyncio.gather(*approvals, return_exceptions=True)
                return outcomes, await other.approve(ids[0])

        outcomes, later = await on_a_loop_of_its_own(cancel_everything_then_approve())
        assert all(isinstance(outcome, asyncio.CancelledError) for outcome in outcomes), outcomes
        assert later is True, "an approval after them was sent"
        assert [q.id for q in await store.pending_questions()] == ids[1:]


async def on_a_loop_of_its_own(work: Coroutine[Any, Any, T], within: float = 10) -> T:
    """What ``work`` returns, run by ``asyncio.run`` in a thread of its own; fails (leaving the thread, which cannot be
    stopped, to the end of the tests) if it does not end within ``within`` seconds."""
    ended: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def run() -> None:
        try:
            outcome = asyncio.run(work)
        except BaseException as error:
            ended.get_loop().call_soon_threadsafe(ended.set_exception, error)
        else:
            ended.get_loop().call_soon_threadsafe(ended.set_result, outcome)

    threading.Thread(target=run, daemon=True).start()
    try:
        return await asyncio.wait_for(ended, within)
    except TimeoutError:
        pytest.fail(f"the event loop of its own did not end within {within} s")


PSYCOPG_KEEPS_PARSED = 4096
"""psycopg converts a statement's ``%(name)s`` placeholders at each execution, unless the statement is this long at
most (bytes; ``psycopg._queries.MAX_CACHED_STATEMENT_LENGTH``): then it keeps the converted form."""


def test_the_statements_of_an_approval_are_short_enough_for_psycopg_to_keep_them_parsed() -> None:
    from sqlalchemy.dialects.postgresql import psycopg as tarry_s_driver

    from tarry.store import deciding

    statements = {
        "approvals together": deciding.fast_statement("accept", "together"),
        "an approval by id": deciding.fast_statement("accept", "unread"),
        "a decline by id": deciding.fast_statement("decline", "unread"),
        "a chat's decision": deciding.fast_statement("accept", "known"),
        "a chat's approval that claims its call": deciding.fast_statement("accept", "claim"),
    }
    for what, statement in statements.items():
        sql = str(statement.compile(dialect=tarry_s_driver.dialect()))  # type: ignore[attr-defined]
        assert len(sql.encode()) <= PSYCOPG_KEEPS_PARSED, f"{what}: {len(sql.encode())} bytes"
