"""Fixtures: real MCP servers for the tests (helpers live in mcp_helpers.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import SERVERS, booking_command, everything_bin, http_server


@pytest.fixture(scope="session")
def booking_url() -> Iterator[str]:
    """The SDK booking server over streamable HTTP on 127.0.0.1."""
    with http_server(booking_command("--http", "{port}")) as url:
        yield url


def _everything() -> Path:
    found = everything_bin()
    if found is None or shutil.which("node") is None:
        pytest.skip(
            "@modelcontextprotocol/server-everything is missing: run "
            "`npm install --prefix .ci/node @modelcontextprotocol/server-everything` "
            "or set TARRY_SERVER_EVERYTHING to its mcp-server-everything binary"
        )
    return found


@pytest.fixture
def everything_command() -> list[str]:
    """The command that runs @modelcontextprotocol/server-everything over stdio (skips when it is missing)."""
    return [str(_everything()), "stdio"]


@pytest.fixture(scope="session")
def everything_http() -> Iterator[str]:
    """The URL of @modelcontextprotocol/server-everything over streamable HTTP, bound to 127.0.0.1.

    Its HTTP mode listens on all interfaces and has no host option: ``servers/loopback.cjs``,
    preloaded with ``node --require``, binds its port to 127.0.0.1.
    """
    script = str(_everything().resolve())
    loopback = str(SERVERS / "loopback.cjs")
    with http_server(["node", "--require", loopback, script, "streamableHttp"], {"PORT": "{port}"}) as url:
        yield url


@pytest.fixture(params=["stdio", "http"])
def everything(request: pytest.FixtureRequest) -> dict[str, Any]:
    """``MCPServer`` keywords for server-everything over stdio, then over streamable HTTP."""
    if request.param == "stdio":
        return {"command": request.getfixturevalue("everything_command")}
    return {"url": request.getfixturevalue("everything_http")}


@pytest.fixture(scope="session")
def shared_tasks_url() -> Iterator[str]:
    """A 2025-11-25 server on the TypeScript SDK whose tasks outlive their session (servers/shared_tasks.cjs)."""
    modules = str(_everything().resolve().parents[3])  # the SDK comes with server-everything
    with http_server(["node", str(SERVERS / "shared_tasks.cjs"), "{port}"], {"NODE_PATH": modules}) as url:
        yield url
