"""The embedded worker in real OS processes: 200 chats with 4 workers, SIGKILL, SIGTERM, cancel, progress."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import pytest

from tarry.store import Store
from tests.jobs.helpers import (
    CHATS,
    claims_left,
    create_orders,
    finish,
    kill_one_midway_then_check,
    markers_of,
    start_proc,
    start_worker,
    wait_until,
)
from tests.jobs.tools import clerk, random_orders


async def test_four_workers_one_killed_carry_every_chat_on_exactly_once(postgres_url: str, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    chat_ids = await create_orders(postgres_url, random_orders(CHATS, seed=6, longest=3.0))
    workers = [start_worker(postgres_url, markers) for _ in range(4)]
    answerer = start_proc(markers, "answer", postgres_url, str(2 * CHATS), "1", "0.01")
    await kill_one_midway_then_check(postgres_url, markers, workers, answerer, chat_ids, first_answers_within=120)


def database(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


async def parked(url: str, calls: list[dict[str, object]]) -> str:
    async with Store(url) as store:
        await store.setup()
        chat = await store.create_chat(agent=clerk())
        await chat.ask(json.dumps(calls))
        assert chat.waiting
        return chat.id


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_sigterm_lets_the_step_finish_then_the_worker_exits_0_holding_nothing(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = database(kind, tmp_path, request)
    markers, started = tmp_path / "markers", tmp_path / "started"
    stall = {"started": str(started), "release": str(tmp_path / "never"), "seconds": 1.5, "approve": True}
    chat_id = await parked(url, [{"name": "stall", "arguments": stall}])
    worker = start_worker(url, markers, lease=30)
    async with Store(url) as store:
        (approval,) = await store.pending_questions(chat_id)
        assert await store.approve(approval.id)
    wait_until(started.exists, 30, "the stall call starting in the worker")
    worker.send_signal(signal.SIGTERM)
    assert "stopped after" in finish(worker)
    async with Store(url) as store:
        chat = await store.load_chat(chat_id)
    assert [m.content for m in chat.messages[-2:]] == ["released", "Done after 1 results."]
    assert markers_of(markers, "stall-done") == [str(started)]
    assert await claims_left(url) == []


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_progress_is_visible_and_a_cancel_is_seen_from_other_processes(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = database(kind, tmp_path, request)
    markers = tmp_path / "markers"
    chat_id = await parked(url, [{"name": "long_work", "arguments": {"order": "w"}}])
    worker = start_worker(url, markers)
    try:
        async with Store(url) as store:
            deadline = time.monotonic() + 30
            while True:  # progress: the worker's checks update the task another process lists
                (task,) = await store.pending_tasks(chat_id)
                if task.status_message is not None and task.status_message.startswith("step 3 "):
                    break
                assert time.monotonic() < deadline, f"progress stuck at {task.status_message!r}"
                await asyncio.sleep(0.05)
            models = len(markers_of(markers, "model"))
            asked = time.monotonic()
            assert await store.cancel(chat_id) is True
            assert await store.cancel(chat_id) is False
            while True:
                chat = await store.load_chat(chat_id)
                if not chat.waiting:
                    break
                assert time.monotonic() - asked < 30, "the cancel was not seen"
                await asyncio.sleep(0.02)
        assert markers_of(markers, "task-cancelled") == ["w"]
        assert "cancelled" in chat.messages[-1].content and chat.messages[-1].role == "tool"
        assert len(markers_of(markers, "model")) == models  # no model call after a cancel
    finally:
        worker.send_signal(signal.SIGTERM)
        finish(worker)
