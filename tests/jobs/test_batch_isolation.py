"""Batched task checks when something goes wrong in one chat: the others' checks are still saved, and nothing is left
claimed or a lease ahead (tarry.jobs.checks' claim_batch and run_batch, on a real SQLite file)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tarry import Agent, Message, Task, Tool
from tarry.clock import utcnow
from tarry.jobs.checks import claim_batch, run_batch
from tarry.live import current_call
from tarry.messages import ModelRequest
from tarry.store import Store
from tarry.store.due import ChatSchedule, pick_due
from tarry.store.tables import chats, tool_calls
from tarry.testing import ScriptedModel
from tarry.tools import ask
from tests.jobs.helpers import claims_left

DEFAULT_POLL = 1.0


class Slow(Tool):
    """A task that works on: each check takes ``seconds`` and counts itself."""

    def execute(self, seconds: float) -> Task:
        return Task(poll_interval=0.01, data={"checks": 0})

    async def resume(self, task: Task, seconds: float) -> Task:
        await asyncio.sleep(seconds)
        return Task(poll_interval=60, data={"checks": task.data["checks"] + 1})


class AsksOnce(Tool):
    """A task whose first check asks a person something as it runs; its next check finishes it."""

    def execute(self) -> Task:
        return Task(poll_interval=0.01, data={})

    async def resume(self, task: Task) -> str:
        RESUMES.append("asks")
        if len(RESUMES) == 1:
            live = current_call.get()
            assert live is not None
            await live.ask(ask("Sure?"))
        return "done"


RESUMES: list[str] = []


class Gated(ScriptedModel):
    """A model that waits for ``gate`` and then fails, as a provider's outage would."""

    def __init__(self, gate: asyncio.Event) -> None:
        super().__init__([])
        self.gate = gate

    async def complete(self, request: ModelRequest) -> Message:
        await self.gate.wait()
        raise RuntimeError("the model provider is down")


def agent(name: str, tool: Tool, model: Callable[[], Any] | None = None) -> Agent:
    return Agent(name, model=model or (lambda: ScriptedModel([[{"name": tool.name, "arguments": {}}]])), tools=[tool])


async def parked(store: Store, made: Agent, calls: list[dict[str, Any]]) -> str:
    """A chat of ``made`` whose model called ``calls``, now waiting on their tasks."""
    model = ScriptedModel([calls])
    chat = await store.create_chat(agent=Agent(made.name, model=lambda: model, tools=made.tools))
    await chat.ask("Go")
    assert chat.waiting
    return chat.id


async def picked_when_due(store: Store, agents: dict[str, Agent], count: int) -> dict[str, ChatSchedule]:
    deadline = time.monotonic() + 10
    picked: dict[str, ChatSchedule] = {}
    while len(picked) < count:
        assert time.monotonic() < deadline, f"only {len(picked)} of {count} chats fell due"
        picked |= await pick_due(store, list(agents), list(picked), count - len(picked))
        await asyncio.sleep(0.02)
    return picked


async def task_data(store: Store, chat_id: str) -> dict[str, Any]:
    query = select(tool_calls.c.state).where(tool_calls.c.chat_id == chat_id)
    state = await store.db.run_read(lambda connection: connection.execute(query).scalar_one())
    return dict(state["task"]["data"])


async def test_a_failing_full_step_neither_holds_back_nor_throws_away_the_other_chats_checks(tmp_path: Path) -> None:
    RESUMES.clear()
    gate = asyncio.Event()
    asker = agent("asker", AsksOnce(), model=lambda: Gated(gate))
    slow = agent("slow", Slow())
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    async with Store(url) as store:
        await store.setup()
        asking = await parked(store, asker, [{"name": "asks_once", "arguments": {}}])
        working = await parked(store, slow, [{"name": "slow", "arguments": {"seconds": 0.3}}])
        agents = {"asker": asker, "slow": slow}
        batch = await claim_batch(store, agents, await picked_when_due(store, agents, 2))
        assert {check.held.chat_id for check in batch.checks} == {asking, working}
        running = asyncio.create_task(run_batch(store, agents, batch, asyncio.Semaphore(8), DEFAULT_POLL))
        # The asking chat's full step waits on its model meanwhile: the slow chat's check is saved all the same.
        deadline = time.monotonic() + 10
        while (await task_data(store, working))["checks"] != 1:
            assert time.monotonic() < deadline, "the slow chat's check was not saved while the other chat's step ran"
            await asyncio.sleep(0.02)
        assert working not in batch.checking and asking in batch.checking
        gate.set()  # the model fails: the full step's failure is the asking chat's alone
        await asyncio.wait_for(running, 10)
        assert batch.checking == set()
        assert RESUMES == ["asks", "asks"]
    assert await claims_left(url) == []


async def test_each_chat_leaves_the_batch_once_its_checks_are_saved(tmp_path: Path) -> None:
    slow = agent("slow", Slow())
    async with Store(f"sqlite:///{tmp_path / 'jobs.db'}") as store:
        await store.setup()
        quick = await parked(store, slow, [{"name": "slow", "arguments": {"seconds": 0.0}}])
        late = await parked(store, slow, [{"name": "slow", "arguments": {"seconds": 1.0}}])
        batch = await claim_batch(store, {"slow": slow}, await picked_when_due(store, {"slow": slow}, 2))
        assert batch.checking == {quick, late}
        left: list[set[str]] = []
        running = asyncio.create_task(
            run_batch(
                store, {"slow": slow}, batch, asyncio.Semaphore(8), DEFAULT_POLL,
                on_leave=lambda: left.append(set(batch.checking)),
            )
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while quick in batch.checking:
            assert time.monotonic() < deadline, "the quick chat never left the batch"
            await asyncio.sleep(0.01)
        assert late in batch.checking and not running.done()
        assert (await task_data(store, quick))["checks"] == 1
        await asyncio.wait_for(running, 10)
        assert batch.checking == set()
        assert left == [{late}, set()]  # the worker is woken as each chat leaves


class Unreadable(Slow):
    """A tool whose setting cannot be read: it fails a batch after its claim committed."""

    @property  # type: ignore[override]
    def checks_in_batches(self) -> bool:
        raise RuntimeError("cannot read the setting")


def database(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}" if kind == "sqlite" else str(request.getfixturevalue("postgres_url"))


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_a_failed_claim_gives_back_its_claims_and_its_picked_chats(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    broken = agent("broken", Unreadable())
    url = database(kind, tmp_path, request)
    async with Store(url) as store:
        await store.setup()
        chat_ids = {await parked(store, broken, [{"name": "unreadable", "arguments": {"seconds": 0}}]) for _ in "ab"}
        picked = await picked_when_due(store, {"broken": broken}, 2)
        with pytest.raises(RuntimeError, match="cannot read the setting"):
            await claim_batch(store, {"broken": broken}, picked)
        query = select(chats.c.next_check_at).where(chats.c.id.in_(chat_ids))
        due = await store.db.run_read(lambda connection: connection.execute(query).scalars().all())
        assert all(at <= utcnow() for at in due), "the picked chats were left a lease ahead"
    assert await claims_left(url) == []


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_a_cancellation_since_the_pick_keeps_the_chat_out_of_the_batch(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    slow = agent("slow", Slow())
    async with Store(database(kind, tmp_path, request)) as store:
        await store.setup()
        cancelled = await parked(store, slow, [{"name": "slow", "arguments": {"seconds": 0}}])
        other = await parked(store, slow, [{"name": "slow", "arguments": {"seconds": 0}}])
        picked = await picked_when_due(store, {"slow": slow}, 2)
        assert await store.cancel(cancelled)  # after the pick, which saw no cancellation
        assert picked[cancelled].cancel_requested_at is None
        batch = await claim_batch(store, {"slow": slow}, picked)
        assert [check.held.chat_id for check in batch.checks] == [other]
        assert batch.full_steps == {cancelled}


class Unsaved(Task):
    """A task that cannot be saved once checked: its ``to_dict`` fails (a bug in an application's task class)."""

    def to_dict(self) -> dict[str, Any]:
        if self.data["checks"]:
            raise ValueError("cannot save this task")
        return super().to_dict()


class Unsavable(Slow):
    """Works on, in a task that cannot be saved once checked."""

    task_class = Unsaved

    async def resume(self, task: Task, seconds: float) -> Task:
        return Unsaved(poll_interval=60, data={"checks": task.data["checks"] + 1})


async def test_a_chat_whose_save_fails_is_given_back_and_the_others_are_saved(tmp_path: Path) -> None:
    slow, unsavable = agent("slow", Slow()), agent("unsavable", Unsavable())
    agents = {"slow": slow, "unsavable": unsavable}
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    async with Store(url) as store:
        await store.setup()
        failing = await parked(store, unsavable, [{"name": "unsavable", "arguments": {"seconds": 0}}])
        working = await parked(store, slow, [{"name": "slow", "arguments": {"seconds": 0}}])
        batch = await claim_batch(store, agents, await picked_when_due(store, agents, 2))
        assert len(batch.checks) == 2
        await run_batch(store, agents, batch, asyncio.Semaphore(8), DEFAULT_POLL)
        assert (await task_data(store, working))["checks"] == 1
        assert (await task_data(store, failing))["checks"] == 0
        query = select(chats.c.next_check_at).where(chats.c.id == failing)
        due = await store.db.run_read(lambda connection: connection.execute(query).scalar_one())
        assert due <= utcnow(), "the chat whose save failed was left a lease ahead"
    assert await claims_left(url) == []
