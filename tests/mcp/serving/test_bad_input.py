"""What a client sends that a database cannot hold, and errors of the server's own, through a real ``tarry mcp
serve`` process on SQLite and PostgreSQL: clear JSON-RPC errors, faithful results, no internals on the wire."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import psycopg
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from .conftest import ServerProcess

DATABASES = pytest.mark.parametrize("database", ["sqlite", "postgresql"], indirect=True)
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
ACCEPT = {"Accept": "application/json, text/event-stream", "content-type": "application/json"}


@asynccontextmanager
async def legacy_session(url: str) -> AsyncIterator[dict[str, str]]:
    """The headers of an initialised 2025-11-25 session of the server at ``url`` (its responses are SSE streams)."""
    async with httpx2.AsyncClient(timeout=60) as http:
        hello = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}
        opened = await http.post(
            url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}, headers=ACCEPT
        )
        headers = {**ACCEPT, "mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": LEGACY}
        await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        yield headers


def modern_call(request_id: int, name: str, arguments: dict[str, Any], **more: Any) -> tuple[str, dict[str, str]]:
    """A 2026-07-28 ``tools/call`` (no session), as raw JSON (which may hold lone surrogates), and its headers."""
    meta = {
        types.PROTOCOL_VERSION_META_KEY: MODERN,
        types.CLIENT_INFO_META_KEY: {"name": "test", "version": "1"},
        types.CLIENT_CAPABILITIES_META_KEY: {"elicitation": {}},
    }
    params = {"name": name, "arguments": arguments, **more, "_meta": meta}
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
    return body, {**ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": name}


@DATABASES
async def test_a_request_id_the_store_cannot_keep_is_a_json_rpc_error(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server()
    async with legacy_session(server.url) as headers, httpx2.AsyncClient(timeout=60) as http:
        for request_id, said in (("x" * 201, "longer than 200 characters"), ("a\x00b", "NUL")):
            body = {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": 1, "b": 2}},
            }
            refused = await http.post(server.url, json=body, headers=headers)
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert error["code"] == -32600 and said in error["message"]
        body = {
            "jsonrpc": "2.0",
            "id": "x" * 200,
            "method": "tools/call",
            "params": {"name": "add", "arguments": {"a": 1, "b": 2}},
        }
        answered = await http.post(server.url, json=body, headers=headers)
        assert answered.status_code == 200 and '"text":"3"' in answered.text


@DATABASES
async def test_text_from_a_tool_comes_back_as_it_was_and_an_answer_no_database_can_hold_is_refused(
    start_server: Callable[..., ServerProcess],
) -> None:
    server = start_server()
    async with httpx2.AsyncClient(timeout=60) as http:
        for number, text in enumerate(["a NUL \x00 here", "a lone \ud800 surrogate"]):
            body, headers = modern_call(number, "echo", {"text": text})
            echoed = json.loads((await http.post(server.url, content=body, headers=headers)).text)
            assert echoed["result"]["content"][0]["text"] == text, echoed

        body, headers = modern_call(5, "survey", {})
        asked = json.loads((await http.post(server.url, content=body, headers=headers)).text)["result"]
        answers = {
            "name": {"action": "accept", "content": {"name": "a\ud800b"}},
            "go": {"action": "accept", "content": {"go": True}},
        }
        body, headers = modern_call(6, "survey", {}, inputResponses=answers, requestState=asked["requestState"])
        refused = json.loads((await http.post(server.url, content=body, headers=headers)).text)
        assert refused["error"]["code"] == -32602 and "lone surrogate (U+D800)" in refused["error"]["message"]


def _break_message_inserts(database: str) -> None:
    """Make every insert of a message fail in the database, as a full disk or a faulty trigger might."""
    if database.startswith("sqlite"):
        with sqlite3.connect(database.removeprefix("sqlite:///")) as connection:
            connection.execute(
                "CREATE TRIGGER boom BEFORE INSERT ON tarry_messages BEGIN SELECT RAISE(ABORT, 'boom'); END"
            )
        return
    plain, options = database.split("?", 1)
    with psycopg.connect(
        plain, autocommit=True, options=options.removeprefix("options=").replace("%3D", "=")
    ) as connection:
        connection.execute(
            "CREATE FUNCTION boom() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$ LANGUAGE plpgsql"
        )
        connection.execute("CREATE TRIGGER boom BEFORE INSERT ON tarry_messages FOR EACH ROW EXECUTE FUNCTION boom()")


@DATABASES
async def test_an_error_of_the_servers_own_reaches_the_client_without_internals(
    start_server: Callable[..., ServerProcess], database: str
) -> None:
    server = start_server()
    async with (
        httpx2.AsyncClient(timeout=60) as http,
        streamable_http_client(server.url, http_client=http) as (read, write),
        ClientSession(dispatcher=JSONRPCDispatcher(read, write)) as session,
    ):
        await session.initialize()
        assert (await session.call_tool("add", {"a": 1, "b": 2})).content[0].text == "3"  # type: ignore[union-attr]
        _break_message_inserts(database)
        with pytest.raises(MCPError) as failed:
            await session.call_tool("add", {"a": 2, "b": 2})
    error = failed.value.error
    assert error.code == -32603 and error.data is None
    assert error.message.startswith("Internal error (reference ")
    reference = error.message.split("reference ")[1].split(")")[0]
    for internal in ("SQL", "INSERT", "tarry_", "boom", ":", "parameters"):
        assert internal not in error.message.replace("Internal error (reference", ""), error.message
    log = Path(server.log.name).read_text()
    assert f"reference {reference}" in log and "boom" in log  # the whole error is in the server's log
