"""Helpers for the MCP tests: commands of the test servers, ports, waiting for questions."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from tarry import Chat, Question

HERE = Path(__file__).parent
SERVERS = HERE / "servers"
ROOT = HERE.parents[1]


GENERIC_CHECK = "wire-schema-valid"
"""The check the conformance suite adds to every scenario (each message matched the schema): no scenario's own."""


def conformance_verdict(output: Path) -> tuple[int, list[str]]:
    """How many of a scenario's own conformance checks succeeded under ``output``, and each that failed or warned.

    A scenario passes when at least one of its own checks succeeded and no check failed or warned
    (a scenario's SHOULD checks warn): the generic check succeeds whatever the scenario found.
    """
    succeeded, wrong = 0, []
    for path in sorted(output.rglob("checks.json")):
        for check in json.loads(path.read_text()):
            if check["status"] in ("FAILURE", "WARNING"):
                wrong.append(f"{check.get('id')} {check['status']}: {check.get('errorMessage')}")
            elif check["status"] == "SUCCESS" and check.get("id") != GENERIC_CHECK:
                succeeded += 1
    return succeeded, wrong


def booking_command(*extra: str) -> list[str]:
    """The command that runs the SDK booking server over stdio."""
    return [sys.executable, str(SERVERS / "booking.py"), *extra]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def served_here(app: Any, port: int | None = None) -> AsyncIterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 (``port`` or a free one) in this process; yields its MCP URL."""
    import uvicorn

    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning", timeout_graceful_shutdown=3))
    running = asyncio.create_task(server.serve())
    loop = asyncio.get_running_loop()
    end = loop.time() + 30
    while not server.started:
        assert not running.done() and loop.time() < end, "the server did not start"
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await running


def wait_for_port(port: int, process: subprocess.Popen[bytes], deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if process.poll() is not None:
            raise RuntimeError(f"the test server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the test server did not listen on {port} within {deadline} s")


@contextmanager
def http_server(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Iterator[str]:
    """Run an MCP server over streamable HTTP on a free 127.0.0.1 port; yields its URL.

    ``{port}`` in ``argv`` and in ``env``'s values becomes the port.
    """
    port = free_port()
    command = [word.format(port=port) for word in argv]
    extra = {key: value.format(port=port) for key, value in (env or {}).items()}
    process = subprocess.Popen(
        command, env={**os.environ, **extra}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


def everything_bin() -> Path | None:
    """server-everything installed by .ci/run (or TARRY_SERVER_EVERYTHING), else ``None``."""
    given = os.environ.get("TARRY_SERVER_EVERYTHING")
    candidates = [Path(given)] if given else []
    candidates.append(ROOT / ".ci" / "node" / "node_modules" / ".bin" / "mcp-server-everything")
    return next((path for path in candidates if path.exists()), None)


async def wait_for_questions(chat: Chat, count: int = 1, *, within: float = 30.0) -> list[Question]:
    """Poll the chat's pending questions until ``count`` are there (fails after ``within`` seconds)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while True:
        questions = await chat.pending_questions()
        if len(questions) >= count:
            return questions
        if loop.time() > end:
            raise AssertionError(f"expected {count} question(s) within {within} s, got {questions!r}")
        await asyncio.sleep(0.05)
