"""Stream events in the store: replayed in order, only within their scope and stream, until they expire."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tarry.mcp_server import StreamEvents
from tarry.store import Store
from tarry.testing import advance_clock


async def test_the_events_after_one_come_back_in_order_from_its_own_stream_and_scope(store: Store) -> None:
    events = StreamEvents(store)
    opening = await events.add("session-a", "1", None)
    first = await events.add("session-a", "1", {"jsonrpc": "2.0", "method": "notifications/progress"})
    await events.add("session-a", "2", {"jsonrpc": "2.0", "id": 2, "result": {}})  # another stream
    await events.add("session-b", "1", {"jsonrpc": "2.0", "id": 1, "result": {"other": True}})  # another session
    last = await events.add("session-a", "1", {"jsonrpc": "2.0", "id": 1, "result": {}})
    assert len({opening, first, last}) == 3 and len(opening) >= 32

    found = await events.after("session-a", opening)
    assert found is not None
    stream, later = found
    assert stream == "1"
    assert [(event.id, event.message) for event in later] == [
        (first, {"jsonrpc": "2.0", "method": "notifications/progress"}),
        (last, {"jsonrpc": "2.0", "id": 1, "result": {}}),
    ]
    assert await events.after("session-a", last) == ("1", [])
    assert await events.after("session-b", opening) is None  # another session cannot name it
    assert await events.after("session-a", "never-sent") is None


async def test_events_expire_and_are_reaped(store: Store) -> None:
    events = StreamEvents(store, ttl=timedelta(minutes=5))
    old = await events.add("s", "1", None)
    advance_clock(301)
    assert await events.after("s", old) is None
    fresh = await events.add("s", "1", None)  # an add reaps too, at most once a minute
    assert await events.after("s", fresh) == ("1", [])
    advance_clock(301)
    assert await events.reap() == 1
    with pytest.raises(ValueError, match="ttl must be positive"):
        StreamEvents(store, ttl=timedelta(0))
