"""``tarry mcp serve`` beyond loopback: bearer tokens, bounded and reaped sessions, request states bound to a client.

Each test runs the server as a real process on 127.0.0.1 and speaks plain HTTP to it. The
warning and the Host headers allowed for other addresses are decided by functions, tested
without binding any address but loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
from mcp_helpers import ROOT

from tarry.cli.mcp_serve import allowed_hosts, exposure_warning

from .conftest import TOOLS, ServerProcess

ANN = "ann-has-a-long-enough-token"
BOB = "bob-has-a-long-enough-token"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


def _token_file(tmp_path: Path) -> str:
    path = tmp_path / "tokens"
    path.write_text(f"# the clients of this server\n{ANN}\n\n{BOB}\n")
    return str(path)


async def _answer(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a POST, whether it came as JSON or as an SSE stream."""
    if response.headers["content-type"].startswith("application/json"):
        return dict(json.loads(await response.aread()))
    async for line in response.aiter_lines():
        if line.startswith("data:") and line[5:].strip():
            frame = json.loads(line[5:])
            if "id" in frame and ("result" in frame or "error" in frame):
                return dict(frame)
    raise AssertionError("the stream ended without an answer")


async def _modern_call(http: httpx2.AsyncClient, url: str, token: str, **params: Any) -> dict[str, Any]:
    """A 2026-07-28 ``tools/call`` (no session; the client declares elicitation) sent with ``token``."""
    meta = {
        types.PROTOCOL_VERSION_META_KEY: MODERN,
        types.CLIENT_INFO_META_KEY: {"name": "exposure-test", "version": "1"},
        types.CLIENT_CAPABILITIES_META_KEY: {"elicitation": {}},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**params, "_meta": meta}}
    headers = {
        "Accept": ACCEPT,
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": params["name"],
        "Authorization": f"Bearer {token}",
    }
    async with http.stream("POST", url, json=body, headers=headers) as response:
        return await _answer(response)  # an error comes with 400 and a JSON-RPC error


async def test_tokens_guard_the_server_and_a_request_state_serves_only_its_client(
    start_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = start_server(options=["--token-file", _token_file(tmp_path)])
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    async with httpx2.AsyncClient(timeout=60) as http:
        anonymous = await http.post(server.url, json=ping, headers={"Accept": ACCEPT})
        forged = await http.post(server.url, json=ping, headers={"Accept": ACCEPT, "Authorization": "Bearer forged"})
        assert (anonymous.status_code, forged.status_code) == (401, 401)

        asked = await _modern_call(http, server.url, ANN, name="pick_colour", arguments={"wall": "north"})
        state, (key,) = asked["result"]["requestState"], asked["result"]["inputRequests"]
        answer = {key: {"action": "accept", "content": {"colour": "blue"}}}
        stolen = await _modern_call(
            http, server.url, BOB, name="pick_colour", arguments={}, inputResponses=answer, requestState=state
        )
        assert stolen["error"]["code"] == -32602
        assert "issued to another client" in stolen["error"]["message"]
        painted = await _modern_call(
            http, server.url, ANN, name="pick_colour", arguments={}, inputResponses=answer, requestState=state
        )
    assert painted["result"]["content"][0]["text"] == "north: 1 coat(s) of blue"


async def _open_session(http: httpx2.AsyncClient, url: str) -> httpx2.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "sessions", "version": "1"}},
    }
    async with http.stream("POST", url, json=body, headers={"Accept": ACCEPT}) as response:
        await response.aread()
        return response


async def _ping(http: httpx2.AsyncClient, url: str, session: str) -> int:
    headers = {"Accept": ACCEPT, "Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY}
    async with http.stream("POST", url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=headers) as pong:
        await pong.aread()
        return pong.status_code


async def test_sessions_are_bounded_and_idle_ones_closed(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server(options=["--max-sessions", "2", "--session-idle-timeout", "2"])
    async with httpx2.AsyncClient(timeout=60) as http:
        first, second = await _open_session(http, server.url), await _open_session(http, server.url)
        sessions = [first.headers["mcp-session-id"], second.headers["mcp-session-id"]]
        refused = await _open_session(http, server.url)
        assert refused.status_code == 503
        assert "Too many open sessions" in refused.json()["error"]["message"]
        assert await _ping(http, server.url, sessions[0]) == 200  # the open ones keep working
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while (opened := await _open_session(http, server.url)).status_code == 503:
            assert loop.time() < end, "no idle session was closed within 60 s"
            await asyncio.sleep(0.2)
        assert opened.status_code == 200
        assert await _ping(http, server.url, sessions[1]) == 404  # the idle one longest (no request since it opened)


def test_serving_beyond_loopback_warns() -> None:
    assert exposure_warning("127.0.0.1", authenticated=False) is None
    assert exposure_warning("localhost", authenticated=False) is None
    open_to_all = exposure_warning("0.0.0.0", authenticated=False)
    assert open_to_all is not None and "anyone who reaches it can call the tools" in open_to_all
    assert "--token-file" in open_to_all
    with_tokens = exposure_warning("192.0.2.7", authenticated=True)
    assert with_tokens is not None and "unencrypted" in with_tokens and "anyone" not in with_tokens


def test_the_host_header_allowed_follows_the_bound_address() -> None:
    loopbacks = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    assert allowed_hosts("127.0.0.1", 8000, []) == loopbacks
    assert allowed_hosts("0.0.0.0", 8000, []) == loopbacks  # every interface: name them with --allowed-host
    assert allowed_hosts("192.0.2.7", 8000, ["mcp.example.com:*"]) == [
        *loopbacks,
        "192.0.2.7:8000",
        "mcp.example.com:*",
    ]
    assert allowed_hosts("2001:db8::7", 8000, []) == [*loopbacks, "[2001:db8::7]:8000"]


async def test_a_host_header_that_is_not_the_servers_is_refused(start_server: Callable[..., ServerProcess]) -> None:
    server = start_server()
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    async with httpx2.AsyncClient(timeout=60) as http:
        rebound = await http.post(
            server.url, json=ping, headers={"Accept": ACCEPT, "Host": f"evil.example:{server.port}"}
        )
    assert rebound.status_code in (403, 421), rebound.status_code


def test_a_bad_token_option_is_refused_by_name(tmp_path: Path) -> None:
    empty = tmp_path / "empty-tokens"
    empty.write_text("# none yet\n")
    argv = [sys.executable, "-m", "tarry.cli", "mcp", "serve", "--tools", TOOLS, "--port", "0"]
    env_path = {"PYTHONPATH": str(ROOT)}
    for extra, said in (
        (["--token-file", str(empty)], "holds no token"),
        (["--token", "short"], "at least 16 characters"),
        (["--token", ANN, "--stdio"], "stdio"),
        (["--task-required", "no_such_tool"], "--task-required no_such_tool: --tools"),
        (["--ask-before-task", "no_such_tool"], "--ask-before-task no_such_tool: --tools"),
    ):
        run = subprocess.run(
            [*argv, "--url", f"sqlite:///{tmp_path / 'x.db'}", *extra],
            env={**os.environ, **env_path}, cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert run.returncode == 2 and said in run.stderr, (extra, run.returncode, run.stderr[-2000:])
