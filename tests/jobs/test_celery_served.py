"""A call served over MCP carried on by a real Celery worker, the server only answering ``tasks/get``.

The server (``serve(..., carry_on=...)``) runs a call's first step and hands its chat to
Celery on Redis; the worker, another OS process, carries it on until it is done. The tool's
``execute`` runs once, in the server; its work finishes in the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tarry.store import Store
from tests.jobs.helpers import start
from tests.mcp.mcp_helpers import served_here

pytest.importorskip("celery", reason="Celery tests need celery: pip install -e '.[test]'")


@contextlib.asynccontextmanager
async def connect(url: str) -> AsyncIterator[tuple[Any, Any]]:
    """An initialised 2025-11-25 SDK session over streamable HTTP, and its dispatcher."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

    async with streamable_http_client(url) as (read, write):
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read, write)
        async with ClientSession(dispatcher=dispatcher) as session:
            await session.initialize()
            yield session, dispatcher


async def test_a_celery_worker_carries_a_served_call_on(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker_url = os.environ.get("TARRY_TEST_REDIS_URL")
    if not broker_url:
        pytest.skip("This Celery test needs TARRY_TEST_REDIS_URL (e.g. .ci/run's value) and a running Redis")
    markers = tmp_path / "markers"
    monkeypatch.setenv("TARRY_TEST_MARKERS", str(markers))
    monkeypatch.setenv("TARRY_TEST_CELERY_BROKER", broker_url)
    monkeypatch.setenv("TARRY_TEST_CELERY_DB", postgres_url)
    monkeypatch.setenv("TARRY_TEST_CELERY_QUEUE", f"tarry-test-{uuid.uuid4().hex[:8]}")
    from tarry.jobs.celery import enqueue, enqueue_on_decisions
    from tarry.mcp import legacy_tasks
    from tarry.mcp_server import serve
    from tests.jobs.served_celery_app import TOOLS, make_app

    celery = make_app(broker_url, postgres_url)
    command = [sys.executable, "-m", "celery", "-A", "tests.jobs.served_celery_app", "worker", "--pool", "threads",
               "--concurrency", "2", "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
               "--without-heartbeat"]  # fmt: skip
    cake = tmp_path / "cake"
    async with Store(postgres_url) as store:
        await store.setup()
        worker = start(command, markers)  # once the schema exists
        try:
            enqueue_on_decisions(store, celery)
            app = serve(TOOLS, store, carry_on=lambda chat_id: enqueue(celery, chat_id), poll_interval_ms=100)
            async with served_here(app) as url, connect(url) as (session, dispatcher):
                created = await legacy_tasks.call_tool_as_task(session, dispatcher, "bake", {"cake": str(cake)})
                task_id = created.task.task_id
                assert (await legacy_tasks.get_task(session, task_id)).status == "working"
                cake.touch()
                loop = asyncio.get_running_loop()
                end = loop.time() + 60
                while (got := await legacy_tasks.get_task(session, task_id)).status == "working":
                    assert loop.time() < end, "the Celery worker did not finish the call within 60 s"
                    await asyncio.sleep(0.1)
                assert got.status == "completed"
                result = await legacy_tasks.task_result(session, task_id)
        finally:
            worker.terminate()
            worker.wait(15)
            for file in worker.files:  # type: ignore[attr-defined]
                file.close()
    assert result["content"][0]["text"] == f"baked {cake}"
    lines = markers.read_text().splitlines()
    assert lines == [f"execute {os.getpid()}", f"done {worker.pid}"]  # once each: the start here, the rest in Celery
