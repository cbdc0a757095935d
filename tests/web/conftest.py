"""Fixtures of the web tests: a SQLite file, a live inbox server, Debian's Chromium driven by Playwright."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.store.conftest import _postgres_schema_url
from tests.web.client import Inbox
from tests.web.server import LiveServer
from tests.web.tools import setup

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """A SQLite file of its own for each test."""
    return f"sqlite:///{tmp_path / 'inbox.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def any_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database, for the tests where the database matters: a SQLite file, then a PostgreSQL schema."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'inbox.db'}"
        setup(url)
        yield url
    else:
        for url in _postgres_schema_url():
            setup(url)
            yield url


@pytest.fixture
def live(database_url: str) -> Iterator[LiveServer]:
    """The inbox served by uvicorn on 127.0.0.1 (a free port), for the test's database."""

    setup(database_url)
    with LiveServer(database_url) as server:
        yield server


@pytest.fixture
def inbox(database_url: str) -> Iterator[Inbox]:
    """A TestClient on the inbox of the test's database, logged out, with the token ``TOKEN``."""
    setup(database_url)
    made = Inbox(database_url)
    with made.client:
        yield made
        made.client.portal.call(made.store.close)  # type: ignore[union-attr]


@pytest.fixture
def any_inbox(any_database: str) -> Iterator[Inbox]:
    """A TestClient on the inbox of the test's database (SQLite, then PostgreSQL), with the token."""
    made = Inbox(any_database)
    with made.client:
        yield made
        made.client.portal.call(made.store.close)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, launched by Playwright.

    Module-scoped: Playwright's sync API holds an event loop in the main thread while it runs,
    which async tests of other modules cannot share.
    """
    if not os.path.exists(CHROMIUM):
        pytest.skip(
            f"The browser tests need Debian's Chromium at {CHROMIUM}: run `apt-get install -y chromium` "
            "(.ci/run does); `playwright install` cannot download browsers here."
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    """A fresh browser profile (no cookies), phone-sized tests make their own."""
    made = browser.new_context(viewport={"width": 1100, "height": 900})
    made.set_default_timeout(15_000)
    yield made
    made.close()


@pytest.fixture
def page(context: Any, live: LiveServer) -> Any:
    """A page logged in to the live inbox with the login link."""
    opened = context.new_page()
    response = opened.goto(live.login)
    assert response is not None and response.ok
    assert opened.url == f"{live.base}/"
    return opened


def screenshot(page: Any, name: str) -> Path:
    """Keep a screenshot of the whole page under artifacts/screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0
    return path
