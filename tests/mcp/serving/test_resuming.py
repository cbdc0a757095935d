"""Resumable SSE streams over real HTTP: a call's stream is let go and resumed with ``Last-Event-ID``.

Only the session that was sent an event id can resume from it: the events are kept in the
store under the session's own scope.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp_helpers import served_here

from tarry.mcp_server import serve
from tarry.store import Store

from .served_tools import TOOLS

VERSION = "2025-11-25"


@pytest.fixture
async def server_url(tmp_path: Path) -> AsyncIterator[str]:
    async with Store(f"sqlite:///{tmp_path / 'served.db'}") as store:
        await store.setup()
        app = serve(TOOLS, store, stream_hold=0.2, retry_ms=250, poll_interval_ms=50)
        async with served_here(app) as url:
            yield url


def _answers(event: dict[str, Any], request_id: int) -> bool:
    return bool(event.get("data")) and json.loads(event["data"]).get("id") == request_id


async def _events(response: httpx2.Response, until: int | None = None) -> list[dict[str, Any]]:
    """The SSE events of a response, read until the server ends it or answers request ``until``."""
    events: list[dict[str, Any]] = []
    event: dict[str, Any] = {}
    async for line in response.aiter_lines():
        if not line:
            if event:
                events.append(event)
                if until is not None and _answers(event, until):
                    return events
            event = {}
            continue
        field, _, value = line.partition(":")
        event[field] = value.removeprefix(" ")
    if event:
        events.append(event)
    return events


class Session:
    """One raw streamable HTTP session of a 2025-11-25 client."""

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        self.id = ""

    def headers(self, **more: str) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": VERSION, **more}
        if self.id:
            headers["Mcp-Session-Id"] = self.id
        return headers

    async def open(self) -> None:
        hello = {
            "protocolVersion": VERSION,
            "capabilities": {},
            "clientInfo": {"name": "resuming-test", "version": "1"},
        }
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}
        async with self.http.stream("POST", self.url, json=body, headers=self.headers()) as opened:
            self.id = opened.headers["mcp-session-id"]
            await _events(opened)
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await self.http.post(self.url, json=done, headers=self.headers())).status_code == 202

    async def post(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        async with self.http.stream("POST", self.url, json=body, headers=self.headers()) as response:
            assert response.status_code == 200
            return await _events(response)

    async def resume(self, last_event_id: str, until: int | None = None) -> list[dict[str, Any]]:
        """The events after ``last_event_id``: until the server ends the stream, or until it answers ``until``."""
        headers = self.headers(**{"Last-Event-ID": last_event_id, "Accept": "text/event-stream"})
        async with self.http.stream("GET", self.url, headers=headers) as response:
            assert response.status_code == 200
            return await _events(response, until)


async def test_a_call_lets_its_stream_go_and_the_client_resumes_it(server_url: str, tmp_path: Path) -> None:
    release = tmp_path / "release"
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    call["params"] = {"name": "build", "arguments": {"release": str(release)}}
    async with httpx2.AsyncClient(timeout=30) as http:
        ann, bob = Session(http, server_url), Session(http, server_url)
        await ann.open()
        await bob.open()
        sent = await ann.post(call)  # ends once the call has held it 0.2 s, the build still running
        assert sent[0]["data"] == "" and sent[0]["retry"] == "250"  # the priming event: an id to resume from
        assert not any(_answers(event, 1) for event in sent)
        last = sent[-1]["id"]

        assert await bob.resume(last) == []  # another session is not replayed Ann's stream
        release.touch()
        resumed = await ann.resume(last, until=1)
    result = json.loads(resumed[-1]["data"])["result"]
    assert result["content"][0]["text"] == f"built {release}"
