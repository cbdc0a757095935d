"""Fixtures of the Slack tests: a database (SQLite, then PostgreSQL), the fake Slack API, and tarry's Slack
endpoint served by uvicorn on 127.0.0.1 in the test's event loop."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from slack_sdk.web.async_client import AsyncWebClient

from tarry.store import Store
from tarry.web.slack import SlackSender, create_slack_app
from tests.slack.fake_slack import BOT_TOKEN, FakeSlack
from tests.slack.signing import SIGNING_SECRET
from tests.slack.tools import principal_for
from tests.slack.waiting import until
from tests.store.conftest import _postgres_schema_url


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, then a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tarry.db'}"
    else:
        yield from _postgres_schema_url()


@pytest.fixture
def slack_api() -> Iterator[FakeSlack]:
    """Slack's Web API, faked on 127.0.0.1."""
    with FakeSlack() as fake:
        yield fake


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    """A set-up store on the fresh database."""
    async with Store(database_url) as opened:
        await opened.setup()
        yield opened


@pytest.fixture
def sender(store: Store, slack_api: FakeSlack) -> SlackSender:
    """The Slack sender, its client pointed at the fake Slack API."""
    return SlackSender(store, AsyncWebClient(token=BOT_TOKEN, base_url=slack_api.base_url))


@dataclass
class Endpoint:
    """tarry's Slack endpoint served over HTTP, and a client to post to it."""

    url: str
    http: httpx.AsyncClient


@pytest.fixture
async def endpoint(store: Store, sender: SlackSender) -> AsyncIterator[Endpoint]:
    """``create_slack_app`` mounted at /slack in a Starlette app, served by uvicorn on a free port."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    slack = create_slack_app(store, sender, signing_secret=SIGNING_SECRET, principal_for=principal_for)
    app = Starlette(routes=[Mount("/slack", app=slack)])
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[listening]))
    await until(lambda: server.started, "the Slack endpoint to start")
    base = f"http://127.0.0.1:{listening.getsockname()[1]}"
    async with httpx.AsyncClient(base_url=base) as http:
        yield Endpoint(f"{base}/slack/interactions", http)
    server.should_exit = True
    await serving
