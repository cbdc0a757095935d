"""``Store.prune``: finished and cancelled chats go with everything they own; what waits, works or is held stays."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from tarry.clock import utcnow
from tarry.errors import ChatNotFoundError
from tarry.mcp_server import ServedTasks
from tarry.messages import Message, ModelRequest
from tarry.store import PruneReport, Store
from tarry.store.tables import chats, decision_events, messages, questions, served_tasks, tool_calls
from tarry.testing import ScriptedModel
from tests.store.test_cli_db import tarry
from tests.store.test_store import park
from tests.store.tools import all_tools, reactive_model

ROOT = Path(__file__).resolve().parents[2]
RACED = 60
"""Finished chats, and waiting chats, in the race of a prune with other processes."""
TRANSFER = [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}]
TABLES = {
    "tarry_chats": chats.c.id,
    "tarry_messages": messages.c.chat_id,
    "tarry_tool_calls": tool_calls.c.chat_id,
    "tarry_questions": questions.c.chat_id,
    "tarry_served_tasks": served_tasks.c.chat_id,
    "tarry_decision_events": decision_events.c.chat_id,
}


async def rows_of(store: Store, chat_ids: Iterable[str]) -> dict[str, int]:
    """How many rows each table holds for the chats."""
    ids = list(chat_ids)

    def count(connection: object) -> dict[str, int]:
        return {
            name: int(connection.scalar(select(func.count()).where(column.in_(ids))))  # type: ignore[attr-defined]
            for name, column in TABLES.items()
        }

    return await store.db.run_read(count)


async def finished(store: Store) -> str:
    """A chat that asked for an approval, got it, ran the call and ended with the model's reply."""
    chat_id = await park(store, TRANSFER)
    (question,) = await store.pending_questions(chat_id)
    assert await store.approve(question.id, by="ada")
    chat = await store.load_chat(chat_id, reactive_model(TRANSFER), all_tools())
    assert (await chat.complete()) is not None and not chat.waiting
    return chat_id


async def cancelled(store: Store) -> str:
    """A parked chat whose cancellation a worker carried out (its calls closed with a cancelled result)."""
    chat_id = await park(store, TRANSFER)
    assert await store.cancel(chat_id)
    chat = await store.load_chat(chat_id, reactive_model(TRANSFER), all_tools())
    await chat.cancel()
    assert not chat.waiting
    return chat_id


class SlowModel(ScriptedModel):
    """A scripted model whose reply waits until the test releases it."""

    def __init__(self, turns: list[str]) -> None:
        super().__init__(turns)
        self.entered, self.release = asyncio.Event(), asyncio.Event()

    async def complete(self, request: ModelRequest) -> Message:
        """The script's next turn, once released."""
        self.entered.set()
        await self.release.wait()
        return await super().complete(request)


async def later() -> datetime:
    """A moment after everything made so far (the clock's resolution may be coarse)."""
    await asyncio.sleep(0.002)
    moment = utcnow()
    await asyncio.sleep(0.002)
    return moment


async def test_finished_and_cancelled_chats_go_with_every_row_they_own(store: Store) -> None:
    done, stopped = await finished(store), await cancelled(store)
    served = ServedTasks(store)
    task = await served.create(done, "transfer_money", ttl_ms=None)
    await served.move(task.id, "completed", result={"content": []})
    waiting = await park(store, TRANSFER)
    before = await rows_of(store, [done, stopped])
    assert all(before[table] > 0 for table in ("tarry_messages", "tarry_tool_calls", "tarry_questions"))
    assert before["tarry_served_tasks"] == 1 and before["tarry_decision_events"] == 2  # an approval, a cancellation
    kept_before = await rows_of(store, [waiting])
    report = await store.prune(finished_before=await later())
    assert report.chats == 2 and report.skipped == 0
    after = await rows_of(store, [done, stopped])
    assert after == {**dict.fromkeys(TABLES, 0), "tarry_decision_events": 2}  # the trail is kept
    assert report.rows == {table: count for table, count in before.items() if table != "tarry_decision_events"}
    assert await rows_of(store, [waiting]) == kept_before
    for gone in (done, stopped):
        with pytest.raises(ChatNotFoundError):
            await store.load_chat(gone)
    assert [summary.id for summary in await store.list_chats()] == [waiting]
    assert [event.chat_id for event in await store.history()] == [done, stopped]


async def test_only_chats_finished_before_the_moment_go(store: Store) -> None:
    old = await finished(store)
    moment = await later()
    recent = await finished(store)
    assert (await store.prune(finished_before=moment)).chats == 1
    assert [summary.id for summary in await store.list_chats()] == [recent]
    assert old not in [summary.id for summary in await store.list_chats()]
    chat = await store.load_chat(recent, reactive_model([]))
    await chat.ask("And again?")
    assert (await store.prune(finished_before=await later())).chats == 1


async def test_chats_that_wait_work_or_are_held_are_never_removed(store: Store) -> None:
    waiting = await park(store, TRANSFER)
    working = await park(store, [{"name": "slow_job", "arguments": {"job": "backup"}}])
    assert [task.data["job"] for task in await store.pending_tasks(working)] == ["backup"]
    answered = await park(store, TRANSFER)  # decided, but not yet carried on: due for its call
    (question,) = await store.pending_questions(answered)
    assert await store.approve(question.id)
    served = await store.create_chat()
    await ServedTasks(store).create(served.id, "slow", ttl_ms=None)  # an MCP client still waits on it
    model = SlowModel(["Done."])
    held = await store.create_chat(model)
    asking = asyncio.ensure_future(held.ask("Take your time."))
    await asyncio.wait_for(model.entered.wait(), 10)  # the model's turn is claimed and under way
    try:
        report = await store.prune(finished_before=await later(), batch_size=2)
    finally:
        model.release.set()
        await asking
    assert report.chats == 0 and report.rows == {}
    assert {summary.id for summary in await store.list_chats()} == {waiting, working, answered, served.id, held.id}
    assert (await store.prune(finished_before=await later())).chats == 1  # the held chat, now finished


async def test_batches_of_one_remove_every_finished_chat(store: Store) -> None:
    done = [await finished(store) for _ in range(3)]
    waiting = await park(store, TRANSFER)
    report = await store.prune(finished_before=await later(), batch_size=1)
    assert report.chats == 3 and report.rows["tarry_chats"] == 3
    assert await rows_of(store, done) == {**dict.fromkeys(TABLES, 0), "tarry_decision_events": 3}
    assert [summary.id for summary in await store.list_chats()] == [waiting]


async def test_the_trail_of_pruned_chats_stays_whole_and_verifies(store: Store) -> None:
    first = await finished(store)
    waiting = await park(store, TRANSFER)
    (question,) = await store.pending_questions(waiting)
    assert await store.decline(question.id, by="bob")  # the kept chat's trail row comes between the pruned ones'
    second, stopped = await finished(store), await cancelled(store)
    events = await store.history()
    assert [event.chat_id for event in events] == [first, waiting, second, stopped]
    report = await store.prune(finished_before=await later())
    assert report.chats == 3 and "tarry_decision_events" not in report.rows
    assert {summary.id for summary in await store.list_chats()} == {waiting}
    assert (await rows_of(store, [first, second, stopped]))["tarry_decision_events"] == 3
    assert await store.history() == events  # every row as it was, hashes and all
    assert await store.verify_trail() is None
    later_chat = await finished(store)  # the chains go on after a prune
    assert [event.chat_id for event in await store.history()][-1] == later_chat
    assert await store.verify_trail() is None


async def test_bad_arguments_are_refused_naming_what_is_wrong(store: Store) -> None:
    now = utcnow()
    with pytest.raises(ValueError, match="aware datetime"):
        await store.prune(finished_before=now.replace(tzinfo=None))
    with pytest.raises(ValueError, match="must not be in the future"):
        await store.prune(finished_before=now + timedelta(hours=1))
    with pytest.raises(TypeError, match="must be a datetime"):
        await store.prune(finished_before="2026-01-01")  # type: ignore[arg-type]
    for size in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="batch_size must be a whole number"):
            await store.prune(finished_before=now, batch_size=size)  # type: ignore[arg-type]


def test_the_sync_twin_prunes(database_url: str) -> None:
    with Store(database_url) as store:
        store.setup_sync()
        chat = store.create_chat_sync(reactive_model([]))
        chat.ask_sync("Hello")
        report = store.prune_sync(finished_before=utcnow())
    assert isinstance(report, PruneReport) and report.chats == 1


async def test_sqlite_gives_the_space_back(tmp_path: Path) -> None:
    from tarry.store.prune import sqlite_space

    async with Store(f"sqlite:///{tmp_path / 'space.db'}") as store:
        await store.setup()
        for _ in range(40):
            chat = await store.create_chat(reactive_model([]))
            await chat.ask("x" * 20_000)
        full = await sqlite_space(store)
        await store.prune(finished_before=await later())
        emptied = await sqlite_space(store)
    assert full is not None and emptied is not None
    assert emptied.size < full.size - 500_000 and emptied.free == 0


def racer(command: str, url: str, ids: list[str], folder: Path, start_file: Path) -> subprocess.Popen[str]:
    """A process of tests.store.prune_racers that works on ``ids`` once ``start_file`` exists."""
    ids_file = folder / f"{command}-ids.json"
    ids_file.write_text(json.dumps(ids))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store.prune_racers", command, url, str(ids_file), str(start_file)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


async def test_a_prune_racing_deciders_and_askers_in_other_processes(database_url: str, tmp_path: Path) -> None:
    async with Store(database_url) as store:
        await store.setup()
        done = [await finished(store) for _ in range(RACED)]
        waiting = [await park(store, TRANSFER) for _ in range(RACED)]
        moment = await later()
        open_ids = [question.id for question in await store.pending_questions()]
        late_ids = [event.question_id for event in await store.history()]  # the finished chats' decided questions
        start_file = tmp_path / "start"
        interleaved = [question_id for pair in zip(late_ids, open_ids, strict=True) for question_id in pair]
        deciding = racer("decide", database_url, interleaved, tmp_path, start_file)
        asking = racer("ask", database_url, done[::3], tmp_path, start_file)
        start_file.touch()
        progress = tmp_path / "decide-ids.json.progress"
        deadline = time.monotonic() + 60
        while not progress.exists() or len(progress.read_text()) < 2 * 5:  # five decisions in: prune in the middle
            assert time.monotonic() < deadline and deciding.poll() is None
            await asyncio.sleep(0.005)
        reports = []
        while deciding.poll() is None or asking.poll() is None:
            reports.append(await store.prune(finished_before=moment, batch_size=1))
            await asyncio.sleep(0.01)
        reports.append(await store.prune(finished_before=moment))
        decided, asked = (json.loads(finish(process)) for process in (deciding, asking))
        assert {decided[i] for i in open_ids} == {"recorded"}  # nothing waiting was removed, every decision landed
        assert {decided[i] for i in late_ids} <= {"lost", "UnknownQuestionError"}
        assert set(asked.values()) <= {"replied", "ChatNotFoundError"}
        replied = {chat_id for chat_id, outcome in asked.items() if outcome == "replied"}
        remaining = {summary.id for summary in await store.list_chats()}
        assert remaining == set(waiting) | replied
        for chat_id in replied:  # kept whole: its four messages, then the question and the reply
            assert len(await store.messages(chat_id)) == 6
        gone = set(done) - replied
        assert sum(report.chats for report in reports) == len(gone)
        left = await rows_of(store, gone)
        assert left.pop("tarry_decision_events") >= len(gone)  # their trail, with the late attempts that lost
        assert left == dict.fromkeys(left, 0)
        for chat_id in waiting:
            chat = await store.load_chat(chat_id, reactive_model(TRANSFER), all_tools())
            await chat.complete()
            assert not chat.waiting


def finish(process: subprocess.Popen[str], timeout: float = 120) -> str:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return out


async def test_the_command_prunes_and_says_what_went(database_url: str, tmp_path: Path) -> None:
    async with Store(database_url) as store:
        await store.setup()
        done, waiting = await finished(store), await park(store, TRANSFER)
        moment = await later()
    done_ = tarry("db", "prune", "--url", database_url, "--finished-before", moment.isoformat(), cwd=tmp_path)
    assert done_.returncode == 0, done_.stderr
    lines = done_.stdout.splitlines()
    assert lines[0].startswith("Removed 1 chat(s) of ") and lines[0].endswith(f"finished before {moment.isoformat()}.")
    assert lines[1:3] == [
        "Rows removed: 4 messages, 1 tool calls, 1 questions, 0 served MCP tasks, 0 trail events.",
        "Their audit trail is kept.",
    ]
    assert any(line.startswith("Database file: ") for line in lines) == database_url.startswith("sqlite")
    async with Store(database_url) as store:
        assert [summary.id for summary in await store.list_chats()] == [waiting]
        assert [event.chat_id for event in await store.history()] == [done]


async def test_the_command_vacuums_an_older_file_and_keeps_the_trail(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as older:  # a file made before its first table had auto_vacuum: NONE, for good
        older.execute("CREATE TABLE made_before (x)")
    url = f"sqlite:///{path}"
    async with Store(url) as store:
        await store.setup()
        done = [await finished(store) for _ in range(3)]
        for _ in range(20):
            await (await store.create_chat(reactive_model([]))).ask("x" * 10_000)
        moment = (await later()).isoformat()
    kept = tarry("db", "prune", "--url", url, "--finished-before", moment, "--batch-size", "2", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr
    assert "Removed 23 chat(s)" in kept.stdout and "`tarry db prune --vacuum` gives them back" in kept.stdout
    async with Store(url) as store:
        done.append(await finished(store))
        moment = (await later()).isoformat()
    again = tarry("db", "prune", "--url", url, "--finished-before", moment, "--vacuum", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "Removed 1 chat(s)" in again.stdout and "Their audit trail is kept." in again.stdout
    sizes = re.search(r"Database file: (\d+) bytes before, (\d+) bytes after\.", again.stdout)
    assert sizes is not None and int(sizes[2]) < int(sizes[1]) - 150_000
    with sqlite3.connect(path) as vacuumed:
        assert vacuumed.execute("PRAGMA auto_vacuum").fetchone() == (2,)  # INCREMENTAL from now on
    async with Store(url) as store:
        assert [event.chat_id for event in await store.history()] == done
        assert await store.verify_trail() is None


def test_the_command_refuses_bad_options_naming_them(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tarry.db'}"
    assert tarry("db", "upgrade", "--url", url, cwd=tmp_path).returncode == 0
    for options, said in (
        (["--finished-before", "last tuesday"], "expected an ISO 8601 date or time"),
        (["--finished-before", "2999-01-01"], "finished_before must not be in the future"),
        (["--finished-before", "2020-01-01", "--drop-trail"], "unrecognized arguments: --drop-trail"),
        (["--finished-before", "2020-01-01", "--batch-size", "0"], "expected a whole number of at least 1"),
        ([], "--finished-before"),
    ):
        refused = tarry("db", "prune", "--url", url, *options, cwd=tmp_path)
        assert refused.returncode == 2 and said in refused.stderr, (options, refused.stderr)
