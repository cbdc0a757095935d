"""Where SQLite transactions run: on the event loop when they need not wait, on a worker thread when they must."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from tarry import Question
from tarry.principals import Principal
from tarry.store import Store
from tarry.store.engine import Durability
from tarry.testing import ScriptedModel
from tests.store.approvers import Payout, may_decide
from tests.store.tools import TransferMoney, reactive_model

PAY = [{"name": "transfer_money", "arguments": {"to": "Bob", "amount": 5}}]

HOLD_THE_WRITE_LOCK = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
connection.execute("COMMIT")
"""


def hold_the_write_lock(path: Path) -> subprocess.Popen[str]:
    """Another process that holds ``path``'s write lock until a line reaches its stdin."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_WRITE_LOCK, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


class Begins:
    """Each transaction a store begins from now on (``BEGIN`` or ``BEGIN IMMEDIATE``) and whether it began on
    the thread that made this, the event loop's."""

    def __init__(self, store: Store) -> None:
        self.seen: list[tuple[str, bool]] = []
        self.write_off_the_loop = threading.Event()
        self._loop_thread = threading.get_ident()
        event.listen(store.db.sync_engine, "before_cursor_execute", self._note)

    def _note(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if statement.startswith("BEGIN"):
            on_loop = threading.get_ident() == self._loop_thread
            self.seen.append((statement, on_loop))
            if statement == "BEGIN IMMEDIATE" and not on_loop:
                self.write_off_the_loop.set()

    def on_loop(self, statement: str) -> set[bool]:
        return {on_loop for begun, on_loop in self.seen if begun == statement}


@pytest.mark.parametrize(("durability", "writes_on_loop"), [("full", False), ("fast", True)])
async def test_only_commits_that_sync_the_disk_leave_the_event_loop(
    tmp_path: Path, durability: Durability, writes_on_loop: bool
) -> None:
    async with Store(f"sqlite:///{tmp_path / 'chats.db'}", durability=durability) as store:
        await store.setup()
        chat = await store.create_chat(reactive_model(PAY), [TransferMoney()])
        begins = Begins(store)
        await chat.ask("Pay Bob 5")  # writes the user's message, then the reply with its call and question
        [question] = await store.pending_questions(chat.id)
        assert await store.approve(question.id)
        loaded = await store.load_chat(chat.id, reactive_model(PAY), [TransferMoney()])
        assert (await loaded.complete()) is not None
    assert begins.on_loop("BEGIN") == {True}, "a read waits for no disk sync: it runs on the loop"
    assert begins.on_loop("BEGIN IMMEDIATE") == {writes_on_loop}


async def test_a_write_waits_for_another_process_lock_on_a_worker_thread_while_the_loop_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "chats.db"
    async with Store(f"sqlite:///{path}", durability="fast") as store:
        await store.setup()
        chat = await store.create_chat(ScriptedModel(["Hello"]))
        begins = Begins(store)
        holder = hold_the_write_lock(path)
        try:
            started = time.monotonic()
            asking = asyncio.create_task(chat.ask("Hi"))
            moved = await asyncio.to_thread(begins.write_off_the_loop.wait, 30)
            assert moved, "the write never moved to a worker thread"
            # Far below the store's busy timeout (30 s), which a loop that waited for the lock itself would sit out:
            assert time.monotonic() - started < 10, "the event loop waited for the lock"
            assert not asking.done(), "the write gave up instead of waiting for the lock"
            summary = await store.chat_summary(chat.id)  # a read goes on meanwhile, on the loop
            assert summary.id == chat.id
        finally:
            assert holder.stdin is not None
            holder.stdin.write("\n")
            holder.stdin.close()
            holder.wait(30)
        reply = await asyncio.wait_for(asking, 30)
        assert reply is not None and reply.content == "Hello"
    assert begins.on_loop("BEGIN IMMEDIATE") == {True, False}, "the write tried the loop first"
    async with Store(f"sqlite:///{path}") as again:
        loaded = await again.load_chat(chat.id)
        assert [message.content for message in loaded.messages] == ["Hi", "Hello"]


async def test_the_wal_stays_small_when_every_write_runs_on_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "chats.db"
    async with Store(f"sqlite:///{path}", durability="fast") as store:
        await store.setup()
        begins = Begins(store)
        for _ in range(3000):  # about 40 MB of WAL if nothing checkpointed it
            await store.create_chat(instructions="x" * 10_000)
        assert begins.on_loop("BEGIN IMMEDIATE") == {True}
        assert Path(f"{path}-wal").stat().st_size < 8_000_000, "the WAL was never checkpointed"


async def test_an_approval_policy_never_runs_on_the_event_loop(tmp_path: Path) -> None:
    ran_on: list[int] = []

    def finance_decides(principal: Principal, question: Question) -> bool:
        ran_on.append(threading.get_ident())
        return may_decide(principal, question)

    async with Store(f"sqlite:///{tmp_path / 'chats.db'}", durability="fast", may_decide=finance_decides) as store:
        await store.setup()
        chat = await store.create_chat(
            reactive_model([{"name": "payout", "arguments": PAY[0]["arguments"]}]), [Payout()]
        )
        await chat.ask("Pay Bob 5 out")
        [question] = await store.pending_questions(chat.id)
        assert await store.approve(question.id, by="ann")
    assert ran_on and threading.get_ident() not in ran_on
