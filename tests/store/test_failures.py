"""A stored chat when things go wrong mid-step: cancellation, bad results, late answers, a closed store."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Connection, text

from tarry import Tool, tool
from tarry.errors import QuestionExpiredError, TarryError
from tarry.store import Store
from tarry.testing import ScriptedModel, advance_clock


def pay_model(final: str = "Done.") -> ScriptedModel:
    def turn(messages: list) -> object:
        return [{"name": "pay", "arguments": {"amount": 5}}] if messages[-1].role == "user" else final

    return ScriptedModel([turn] * 5)


async def test_a_cancelled_complete_keeps_the_claim_so_the_tool_never_runs_twice(database_url: str) -> None:
    runs: list[int] = []
    entered, release = threading.Event(), threading.Event()

    @tool
    def pay(amount: int) -> str:
        """Pays, slowly."""
        runs.append(amount)
        entered.set()
        release.wait(10)
        return "paid"

    async with Store(database_url, lease=0.5) as store:
        await store.setup()
        chat = await store.create_chat(pay_model(), [pay])
        asking = asyncio.create_task(chat.ask("Pay"))
        await asyncio.to_thread(entered.wait, 10)
        asking.cancel()  # the caller gives up while the tool's thread still runs
        with pytest.raises(asyncio.CancelledError):
            await asking
        release.set()
    deadline = time.monotonic() + 30
    async with Store(database_url, lease=0.5) as other:
        while True:
            again = await other.load_chat(chat.id, pay_model(), [pay])
            reply = await again.complete()
            if not again.waiting:
                break
            assert time.monotonic() < deadline, "the call was never closed"
            await asyncio.sleep(0.1)
    assert runs == [5]
    assert "interrupted" in json.loads(again.messages[2].content)["error"]
    assert reply is not None and reply.content == "Done."


async def test_a_result_that_is_not_json_is_an_error_for_the_model_and_runs_once(store: Store) -> None:
    runs: list[int] = []

    @tool
    def pay(amount: int) -> object:
        """Returns something JSON cannot hold."""
        runs.append(amount)
        return object()

    chat = await store.create_chat(pay_model(), [pay])
    reply = await chat.ask("Pay")
    assert reply is not None and reply.content == "Done."
    assert "Unable to serialize" in json.loads(chat.messages[2].content)["error"]
    await chat.complete()
    assert runs == [5]


async def test_a_late_answer_to_a_lapsed_approval_is_an_error_even_after_the_call_closed(store: Store) -> None:
    class Pay(Tool):
        """Pays once a person approves, within a moment."""

        requires_approval = True
        approval_ttl = 60

        def execute(self, amount: int) -> str:
            return "paid"

    chat = await store.create_chat(pay_model(), [Pay()])
    await chat.ask("Pay")
    (approval,) = await chat.pending_questions()
    assert approval.expires_at is not None
    advance_clock(61)
    await chat.complete()
    assert "lapsed" in json.loads(chat.messages[2].content)["error"]
    with pytest.raises(QuestionExpiredError):
        await store.approve(approval.id)
    with pytest.raises(QuestionExpiredError):
        await chat.decline(approval, "too late")


async def test_a_store_closes_twice_and_says_so_when_used_after(database_url: str) -> None:
    store = Store(database_url)
    await store.setup()
    await store.close()
    await store.close()
    with pytest.raises(TarryError, match="is closed"):
        await store.pending_questions()


async def test_closing_a_sqlite_store_waits_for_the_transaction_it_runs(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'closing.db'}")
    await store.setup()
    started, release = threading.Event(), threading.Event()

    def slow(connection: Connection) -> int:
        started.set()
        release.wait(30)
        return int(connection.execute(text("SELECT count(*) FROM tarry_chats")).scalar_one())

    running = asyncio.ensure_future(store.db.run_write(slow))
    await asyncio.to_thread(started.wait, 30)
    closing = asyncio.ensure_future(store.close())
    done, _ = await asyncio.wait({closing}, timeout=0.3)
    assert not done, "the store closed under a running transaction"
    release.set()
    assert await running == 0  # its connection stayed open until it finished
    await closing
    with pytest.raises(TarryError, match="is closed"):
        await store.pending_questions()
