"""``subscriptions/listen``: task status notifications from one server process for a task moved through another.

Two ``tarry mcp serve`` processes share one database (SQLite, then PostgreSQL). A 2026-07-28 client starts a call that
asks a question through process A, listens for its task on process B, and answers through A:
B's stream tells it the task is ``input_required``, then ``completed`` with its result, and ends.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import mcp_types as types
import pytest

from .conftest import ServerProcess

VERSION = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"


def _request(request_id: int, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A 2026-07-28 request (the per-request envelope, declaring the tasks extension) and its headers."""
    meta = {
        types.PROTOCOL_VERSION_META_KEY: VERSION,
        types.CLIENT_INFO_META_KEY: {"name": "listening-test", "version": "1"},
        types.CLIENT_CAPABILITIES_META_KEY: {"elicitation": {}, "extensions": {TASKS: {}}},
    }
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": meta}}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": VERSION, "Mcp-Method": method}
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    return body, headers


async def _frames(response: httpx2.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of an SSE response, as they arrive."""
    async for line in response.aiter_lines():
        if line.startswith("data:") and line[5:].strip():
            yield json.loads(line[5:])


async def _call(http: httpx2.AsyncClient, url: str, request_id: int, method: str, **params: Any) -> dict[str, Any]:
    body, headers = _request(request_id, method, params)
    async with http.stream("POST", url, json=body, headers=headers) as response:
        if response.headers["content-type"].startswith("application/json"):
            answer: dict[str, Any] = json.loads(await response.aread())
            return answer
        async for frame in _frames(response):
            if frame.get("id") == request_id:
                return frame
    raise AssertionError(f"no answer to {method}")


async def _until(frames: AsyncIterator[dict[str, Any]], found: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    async for frame in frames:
        if found(frame):
            return frame
    raise AssertionError("the stream ended first")


def status(wanted: str) -> Callable[[dict[str, Any]], bool]:
    """Whether a frame is a ``notifications/tasks`` saying the task is ``wanted``."""
    return lambda frame: frame.get("method") == "notifications/tasks" and frame["params"]["status"] == wanted


@pytest.mark.parametrize("database", ["sqlite", "postgresql"], indirect=True)
async def test_a_listener_hears_a_task_move_through_another_process(
    start_server: Callable[..., ServerProcess],
) -> None:
    a, b = start_server(), start_server()
    async with httpx2.AsyncClient(timeout=60) as http:
        started = await _call(http, a.url, 1, "tools/call", name="pick_colour", arguments={"wall": "north"})
        task_id = started["result"]["taskId"]
        assert started["result"]["resultType"] == "task"

        body, headers = _request(2, "subscriptions/listen", {"notifications": {"taskIds": [task_id, "not-a-task"]}})
        async with http.stream("POST", b.url, json=body, headers=headers) as listening:
            frames = _frames(listening)
            ack = await anext(frames)
            assert ack["method"] == "notifications/subscriptions/acknowledged"
            assert ack["params"]["notifications"] == {"taskIds": [task_id]}  # not the task it cannot see

            asking = await asyncio.wait_for(_until(frames, status("input_required")), 60)
            assert asking["params"]["taskId"] == task_id and asking["params"]["_meta"][SUBSCRIPTION] == 2
            [key] = asking["params"]["inputRequests"]

            answer = {key: {"action": "accept", "content": {"colour": "red", "coats": 2}}}
            updated = await _call(http, a.url, 3, "tasks/update", taskId=task_id, inputResponses=answer)
            assert updated["result"]["resultType"] == "complete"

            done = await asyncio.wait_for(_until(frames, status("completed")), 60)
            assert done["params"]["result"]["content"][0]["text"] == "north: 2 coat(s) of red"
            end = await asyncio.wait_for(_until(frames, lambda frame: frame.get("id") == 2), 30)
            assert end["result"]["_meta"][SUBSCRIPTION] == 2  # every task ended: the stream closes gracefully


async def test_a_listen_without_the_tasks_extension_acknowledges_no_task(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server()
    asked = {"notifications": {"taskIds": ["x"], "promptsListChanged": True}}
    body, headers = _request(1, "subscriptions/listen", asked)
    del body["params"]["_meta"][types.CLIENT_CAPABILITIES_META_KEY]["extensions"]
    async with (
        httpx2.AsyncClient(timeout=30) as http,
        http.stream("POST", server.url, json=body, headers=headers) as listening,
    ):
        frames = [frame async for frame in _frames(listening)]
    assert frames[0]["params"]["notifications"] == {}  # no task, and no prompts to change
    assert frames[-1]["id"] == 1 and len(frames) == 2
