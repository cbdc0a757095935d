"""Tasks bound to the OAuth client the SDK's auth verified: another client's task is not found.

The server runs over real HTTP (uvicorn) behind the SDK's bearer-token checks, with a token
verifier standing in for the authorization server; each client sends its own token.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_helpers import free_port, served_here

from tarry.mcp import legacy_tasks
from tarry.mcp_server import serve
from tarry.store import Store

from .served_tools import TOOLS


class Tokens:
    """A token verifier (the SDK's ``TokenVerifier``) that knows two clients' bearer tokens."""

    def __init__(self, clients: dict[str, str]) -> None:
        self.clients = clients

    async def verify_token(self, token: str) -> AccessToken | None:
        client = self.clients.get(token)
        return None if client is None else AccessToken(token=token, client_id=client, scopes=["tools"])


@pytest.fixture
async def server_url(tmp_path: Path) -> AsyncIterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    async with Store(f"sqlite:///{tmp_path / 'served.db'}") as store:
        await store.setup()
        auth = AuthSettings(
            issuer_url="https://auth.example.com", resource_server_url=url, validate_token_resource=False
        )
        tokens = Tokens({"token-of-ann": "ann", "token-of-bob": "bob"})
        app = serve(TOOLS, store, auth=auth, token_verifier=tokens, list_tasks=True)
        async with served_here(app, port) as served:
            yield served


@contextlib.asynccontextmanager
async def connect(url: str, token: str) -> AsyncIterator[tuple[ClientSession, JSONRPCDispatcher[Any]]]:
    """An initialised 2025-11-25 session that sends ``token`` as its bearer token."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
    ):
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read, write)
        async with ClientSession(dispatcher=dispatcher) as session:
            await session.initialize()
            yield session, dispatcher


async def _listed(session: ClientSession) -> list[str]:
    listing = types.ListTasksRequest(params=types.PaginatedRequestParams())
    return [task.task_id for task in (await session.send_request(listing, types.ListTasksResult)).tasks]


async def test_a_client_sees_only_its_own_tasks(server_url: str, tmp_path: Path) -> None:
    release = tmp_path / "release"
    async with connect(server_url, "token-of-ann") as (ann, ann_dispatcher):
        created = await legacy_tasks.call_tool_as_task(
            ann, ann_dispatcher, "build", {"release": str(release)}, ttl_ms=60_000
        )
        task_id = created.task.task_id
        async with connect(server_url, "token-of-bob") as (bob, bob_dispatcher):
            bobs = await legacy_tasks.call_tool_as_task(bob, bob_dispatcher, "add", {"a": 1, "b": 2}, ttl_ms=60_000)
            for attempt in (
                legacy_tasks.get_task(bob, task_id),
                legacy_tasks.task_result(bob, task_id),
                legacy_tasks.cancel_task(bob, task_id),
            ):
                with pytest.raises(MCPError, match="Task not found"):
                    await attempt
            assert await _listed(bob) == [bobs.task.task_id]
            assert (await legacy_tasks.task_result(bob, bobs.task.task_id))["content"][0]["text"] == "3"
        assert await _listed(ann) == [task_id]
        assert (await legacy_tasks.get_task(ann, task_id)).status == "working"  # Bob's cancel did not reach it
        release.touch()
        done = await legacy_tasks.task_result(ann, task_id)
    assert done["content"][0]["text"] == f"built {release}"


async def test_a_request_without_a_valid_token_is_refused(server_url: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient() as http:
        anonymous = await http.post(server_url, json=body, headers=headers)
        forged = await http.post(server_url, json=body, headers={**headers, "Authorization": "Bearer forged"})
    assert anonymous.status_code == 401 and forged.status_code == 401
