"""Fixtures: real MCP servers for the tests (helpers live in mcp_helpers.py)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest
from mcp_helpers import booking_command, everything_bin, free_port, wait_for_port


@pytest.fixture(scope="session")
def booking_url() -> Iterator[str]:
    """The SDK booking server over streamable HTTP on 127.0.0.1."""
    port = free_port()
    process = subprocess.Popen([*booking_command("--http", str(port))], stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def everything_command() -> list[str]:
    """The command that runs @modelcontextprotocol/server-everything over stdio (skips when it is missing)."""
    found = everything_bin()
    if found is None or shutil.which("node") is None:
        pytest.skip(
            "@modelcontextprotocol/server-everything is missing: run "
            "`npm install --prefix .ci/node @modelcontextprotocol/server-everything` "
            "or set TARRY_SERVER_EVERYTHING to its mcp-server-everything binary"
        )
    return [str(found), "stdio"]
