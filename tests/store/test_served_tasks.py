"""Served MCP tasks in the store: unguessable ids, checked transitions, TTL, owners, reaping."""

from __future__ import annotations

import pytest

from tarry.mcp_server import ServedTasks
from tarry.mcp_server.served_tasks import TaskTransitionError
from tarry.store import Store
from tarry.testing import advance_clock


async def _tasks(store: Store) -> tuple[ServedTasks, str]:
    chat = await store.create_chat()
    return ServedTasks(store), chat.id


async def test_a_task_moves_only_along_the_spec_transitions(store: Store) -> None:
    tasks, chat_id = await _tasks(store)
    task = await tasks.create(chat_id, "slow", ttl_ms=60_000, poll_interval_ms=500)
    assert len(task.id) >= 43 and task.status == "working" and task.created_at == task.last_updated_at
    asked = await tasks.move(task.id, "input_required", status_message="Which colour?")
    assert (asked.status, asked.status_message) == ("input_required", "Which colour?")
    assert asked.last_updated_at >= task.last_updated_at
    await tasks.move(task.id, "working")
    done = await tasks.move(task.id, "completed", result={"content": [{"type": "text", "text": "ok"}]})
    assert done.done() and done.result == {"content": [{"type": "text", "text": "ok"}]}
    for status in ("working", "cancelled", "completed"):
        with pytest.raises(TaskTransitionError, match="completed"):
            await tasks.move(task.id, status)  # type: ignore[arg-type]
    read = await tasks.get(task.id)
    assert read is not None and read.status == "completed" and read.result == done.result
    with pytest.raises(ValueError, match="Unknown task status 'paused'"):
        await tasks.move(task.id, "paused")  # type: ignore[arg-type]


async def test_an_expired_task_is_not_found_and_is_reaped(store: Store) -> None:
    tasks, chat_id = await _tasks(store)
    short = await tasks.create(chat_id, "slow", ttl_ms=1_000)
    forever = await tasks.create(chat_id, "slow", ttl_ms=None)
    advance_clock(2)
    assert await tasks.get(short.id) is None
    assert [task.id for task in await tasks.list()] == [forever.id]
    with pytest.raises(LookupError):
        await tasks.move(short.id, "completed")
    assert await tasks.reap() == 1
    assert await tasks.get(forever.id) is not None


async def test_a_task_is_seen_only_by_the_owner_that_created_it(store: Store) -> None:
    tasks, chat_id = await _tasks(store)
    alices = await tasks.create(chat_id, "slow", ttl_ms=None, owner="alice")
    anonymous = await tasks.create(chat_id, "slow", ttl_ms=None)
    assert await tasks.get(alices.id, owner="bob") is None
    assert await tasks.get(alices.id) is None
    assert (await tasks.get(alices.id, owner="alice")) is not None
    assert [task.id for task in await tasks.list(owner="alice")] == [alices.id]
    assert [task.id for task in await tasks.list()] == [anonymous.id]


async def test_listing_pages_with_a_cursor(store: Store) -> None:
    tasks, chat_id = await _tasks(store)
    made = [await tasks.create(chat_id, "slow", ttl_ms=None) for _ in range(5)]
    first = await tasks.list(limit=2)
    rest = await tasks.list(after=first[-1].id, limit=10)
    assert [task.id for task in first + rest] == [task.id for task in made]
    with pytest.raises(ValueError, match="Unknown cursor"):
        await tasks.list(after="nope")


async def test_bad_durations_are_refused(store: Store) -> None:
    tasks, chat_id = await _tasks(store)
    with pytest.raises(ValueError, match="ttl_ms must be a non-negative"):
        await tasks.create(chat_id, "slow", ttl_ms=-1)
    with pytest.raises(ValueError, match="poll_interval_ms"):
        await tasks.create(chat_id, "slow", ttl_ms=None, poll_interval_ms=1.5)  # type: ignore[arg-type]
