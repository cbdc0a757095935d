"""Databases for the store tests: a SQLite file always, PostgreSQL when TARRY_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from tarry.store import Store
from tests.store.approvers import may_decide

POSTGRES_URL = os.environ.get("TARRY_TEST_POSTGRES_URL")
SKIP_POSTGRES = (
    "PostgreSQL tests need TARRY_TEST_POSTGRES_URL, e.g. postgresql://postgres@127.0.0.1:5432/test "
    "(a server you may create schemas in)"
)


def _postgres_schema_url() -> Iterator[str]:
    if not POSTGRES_URL:
        pytest.skip(SKIP_POSTGRES)
    schema = f"tarry_test_{uuid.uuid4().hex[:12]}"
    plain = POSTGRES_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in POSTGRES_URL else "?"
    try:
        yield f"{POSTGRES_URL}{separator}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(plain, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, then a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tarry.db'}"
    else:
        yield from _postgres_schema_url()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    """A set-up store on the fresh database."""
    async with Store(database_url) as opened:
        await opened.setup()
        yield opened


@pytest.fixture
async def finance(database_url: str) -> AsyncIterator[Store]:
    """A set-up store on the fresh database whose ``may_decide`` admits finance (``tests.store.approvers``)."""
    async with Store(database_url, may_decide=may_decide) as opened:
        await opened.setup()
        yield opened


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL schema (skips without TARRY_TEST_POSTGRES_URL)."""
    yield from _postgres_schema_url()
